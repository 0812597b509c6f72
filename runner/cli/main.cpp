// Purpose: the `exprun` executable: CLI11 subcommands only — each adds its options and calls its
// command in the library (runner/cli/Commands.h); no logic here.
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "runner/Version.h"
#include "runner/cli/Commands.h"
#include "runner/spec/Catalog.h"

namespace {

using namespace exprun;
// A subcommand and what runs when it is the one given.
using Command = std::pair<CLI::App*, std::function<int()>>;

// The options `run` and `launch` share (launch forwards them to its workers); returns --resume.
CLI::Option* addRunOptions(CLI::App* cmd, RunArgs& args, const std::string& resumeHelp) {
  cmd->add_option("spec", args.spec, "experiment spec (YAML)")->required();
  cmd->add_option("--set", args.sets, "override a spec value: key.path=value (repeatable)");
  cmd->add_option("--out", args.outDir, "directory of the result file (default: the spec's output.dir)");
  cmd->add_flag("--overwrite", args.overwrite, "replace an existing result file");
  auto* resume = cmd->add_option("--resume", args.resume, resumeHelp)->expected(0, 1);
  cmd->add_flag("--force", args.force, "resume although the spec differs from the checkpoint's");
  return resume;
}

// --resume without a value means auto.
RunArgs withResume(RunArgs args, const CLI::Option* resume) {
  if (resume->count() > 0 && args.resume.empty()) args.resume = "auto";
  return args;
}

Command runCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "train SPEC and write <out>/<name>.json");
  auto* resume =
      addRunOptions(cmd, *args, "continue from a checkpoint: auto (the newest in the spec's checkpoint folder) or a path");
  return {cmd, [=] { return cmdRun(withResume(*args, resume)); }};
}

Command launchCommand(CLI::App& app) {
  auto launch = std::make_shared<LaunchArgs>();
  auto run = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("launch", "start data-parallel workers of `exprun run` on this node (torchrun's variables)");
  cmd->add_option("--nproc-per-node", launch->nprocPerNode, "workers on this node")->check(CLI::PositiveNumber);
  cmd->add_option("--nnodes", launch->nnodes, "nodes in the job")->check(CLI::PositiveNumber);
  cmd->add_option("--node-rank", launch->nodeRank, "this node's index in [0, nnodes)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--master-addr", launch->masterAddr, "host of rank 0 (node 0)");
  cmd->add_option("--master-port", launch->masterPort,
                  "port of the rendezvous store (default: a free port on one node, 29500 on several)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--max-restarts", launch->maxRestarts, "restart all workers up to K times after a failure")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--grace-s", launch->graceS, "seconds between SIGTERM and SIGKILL when stopping workers");
  cmd->add_option("--worker-exe", launch->exe,
                  "run workers with this executable (a wrapper script, a debugger) instead of this exprun");
  auto* resume = addRunOptions(cmd, *run, "continue from a checkpoint: auto or a path (restarts imply auto)");
  return {cmd, [=] { return cmdLaunch(*launch, withResume(*run, resume)); }};
}

Command profileCommand(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  auto window = std::make_shared<std::pair<std::int64_t, std::int64_t>>(5, 5);  // start step, steps
  auto* cmd = app.add_subcommand("profile",
                                 "train SPEC for a few steps under LibTorch's profiler: <out>/<name>.trace.json, the "
                                 "per-module table, one step's memory timeline (in <out>/<name>.json)");
  cmd->add_option("spec", args->spec, "experiment spec (YAML)")->required();
  cmd->add_option("--steps", window->second, "optimizer steps traced")->check(CLI::Range(1, 1000));
  cmd->add_option("--start", window->first, "steps run before the window (warm-up)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--set", args->sets, "override a spec value: key.path=value (repeatable)");
  cmd->add_option("--out", args->outDir, "directory of the result and trace (default: <the spec's output.dir>/profile)");
  return {cmd, [=] { return cmdProfile(*args, window->first, window->second); }};
}

Command validateCommand(CLI::App& app) {
  auto spec = std::make_shared<std::string>();
  auto sets = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("validate", "print the fully resolved spec and the model's parameter count");
  cmd->add_option("spec", *spec, "experiment spec (YAML)")->required();
  cmd->add_option("--set", *sets, "override a spec value: key.path=value (repeatable)");
  return {cmd, [=] { return cmdValidate(*spec, *sets); }};
}

Command exportCommand(CLI::App& app) {
  struct Args {
    std::string checkpoint, format = "safetensors", out;
    bool ema = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("export", "write a checkpoint's weights for other tools (safetensors, torchvision key names)");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder (step-*) or checkpoint root (its newest)")->required();
  cmd->add_option("--format", a->format, "output format (safetensors)");
  cmd->add_option("-o,--output", a->out, "output file")->required();
  cmd->add_flag("--ema", a->ema, "the EMA weights instead of the raw ones");
  return {cmd, [=] { return cmdExport(a->checkpoint, a->format, a->out, a->ema); }};
}

Command prepareTextCommand(CLI::App& app) {
  struct Args {
    std::string input, out;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand(
      "prepare-text", "a text file as character-level tokens for the tokens data plugin (train.bin, val.bin, meta.json; "
                      "nanoGPT's shakespeare_char rules)");
  cmd->add_option("input", a->input, "a UTF-8 text file")->required();
  cmd->add_option("outdir", a->out, "the folder to write (data.dir of a tokens spec)")->required();
  return {cmd, [=] { return cmdPrepareText(a->input, a->out); }};
}

Command sampleCommand(CLI::App& app) {
  auto a = std::make_shared<SampleArgs>();
  auto* cmd = app.add_subcommand("sample", "generate text from a character-level language model's checkpoint");
  cmd->add_option("checkpoint", a->checkpoint, "checkpoint folder (step-*) or checkpoint root (its newest)")->required();
  cmd->add_option("--prompt", a->prompt, "the text to continue (default: a newline)");
  cmd->add_option("--tokens", a->tokens, "characters to generate (default 200)")->check(CLI::PositiveNumber);
  cmd->add_option("--temperature", a->temperature, "divides the logits (default 0.8)")->check(CLI::PositiveNumber);
  cmd->add_option("--top-k", a->topK, "sample among the k likeliest (default 200; 0: all)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", a->seed, "the sampler's seed (default 1337)");
  cmd->add_option("--meta", a->meta, "the vocabulary (meta.json; default: the one in the spec's data.dir)");
  cmd->add_flag("--ema", a->ema, "the EMA weights instead of the raw ones");
  return {cmd, [=] { return cmdSample(*a); }};
}

Command planCommand(CLI::App& app) {
  auto p = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand(
      "plan", "find the micro-batch and accumulation that fit a memory budget here (--memory-budget), or estimate "
              "them for CUDA devices this machine does not have (--for cuda --device-memory)");
  cmd->add_option("spec", p->spec, "experiment spec (YAML)")->required();
  auto* budget = cmd->add_option("--memory-budget", p->budget, "per-process memory budget here, e.g. 20GiB");
  auto* forCuda = cmd->add_option("--for", p->forDevice, "estimate for this kind of device instead (cuda)")
                      ->check(CLI::IsMember({"cuda"}));
  auto* memory = cmd->add_option("--device-memory", p->deviceMemory, "memory of one device, e.g. 24GiB (with --for)");
  forCuda->needs(memory);
  memory->needs(forCuda);
  budget->excludes(forCuda);
  cmd->add_option("--gpus", p->gpus, "devices the global batch is spread over (with --for; default 1)")
      ->check(CLI::PositiveNumber)->needs(forCuda);
  cmd->add_option("--global-batch", p->globalBatch,
                  "target global batch (default: train.global_batch, else batch x processes x accumulate)");
  cmd->add_option("--cuda-context", p->context, "allowance for the CUDA context and libraries (default 512MiB)")
      ->needs(forCuda);
  cmd->add_option("--workspace", p->workspace, "allowance for cuDNN/cuBLAS workspaces (default 256MiB)")->needs(forCuda);
  cmd->add_option("--fragmentation", p->fragmentation,
                  "allocator fragmentation, a fraction of the allocated bytes (default 0.10)")
      ->check(CLI::Range(0.0, 1.0))->needs(forCuda);
  cmd->add_option("--probe-batches", p->probeBatches,
                  "micro-batches measured for the estimate (default 8 16 32; doubled until linear)")
      ->check(CLI::PositiveNumber)->needs(forCuda);
  cmd->add_option("--json", p->jsonOut, "also write the plan as JSON to this file");
  cmd->add_option("--set", p->sets, "override a spec value: key.path=value (repeatable)");
  return {cmd, [=] { return cmdPlan(*p); }};
}

Command projectCommand(CLI::App& app) {
  auto p = std::make_shared<ProjectArgs>();
  auto* cmd = app.add_subcommand(
      "project", "project memory per device and epoch time on CUDA devices this machine does not have (a projection, "
                 "from published peaks and throughputs; see runner/plan/Projection.h)");
  cmd->add_option("specs", p->specs, "experiment specs (YAML)")->required();
  cmd->add_option("--gpus", p->gpus, "devices per spec: one count for all, or one per spec (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--device", p->device, "the device projected on (default rtx3090)");
  cmd->add_option("--calibrate", p->calibrateOn,
                  "devices whose published ResNet-50 throughput calibrates the efficiency (default v100-sxm2-16gb "
                  "a100-sxm4-80gb)");
  cmd->add_option("--images", p->images, "training images per epoch (default 1281167, ILSVRC-2012)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--link-gbps", p->linkGbps, "allreduce bus bandwidth between devices, GB/s (default 25.8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", p->jsonOut, "also write the projection as JSON to this file");
  cmd->add_option("--md", p->mdOut, "also write the Markdown to this file");
  cmd->add_option("--set", p->sets, "override a spec value in every spec: key.path=value (repeatable)");
  return {cmd, [=] { return cmdProject(*p); }};
}

Command reportCommand(CLI::App& app) {
  auto r = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand("report", "compare result files: table (md, csv, json) or HTML page with charts");
  cmd->add_option("results", r->files, "result files (JSON, schema 1), or folders of Slurm sweeps (their tasks' result files)")->required();
  cmd->add_option("--baseline", r->baseline, "run name the speed-ups refer to (default: the first file's)");
  cmd->add_option("--format", r->format, "md, csv, html or json (default: md)")
      ->check(CLI::IsMember({"md", "csv", "html", "json"}));
  cmd->add_option("-o,--output", r->output, "write to FILE (atomically) instead of stdout");
  return {cmd, [=] { return cmdReport(*r); }};
}

Command sweepCommand(CLI::App& app) {
  auto s = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand(
      "sweep", "run SPEC once per combination of the grids (cartesian product), then report on all the runs");
  cmd->add_option("spec", s->spec, "experiment spec (YAML)");
  cmd->add_option("--grid", s->grids, "key.path=v1,v2,... (repeatable; the first grid varies slowest)");
  cmd->add_option("--set", s->sets, "override a spec value for every run: key.path=value (repeatable)");
  cmd->add_option("--out", s->outDir, "directory of the result files and report (default: the spec's output.dir)");
  cmd->add_option("--launch", s->launch, "run each combination through `exprun launch --nproc-per-node N`")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--print", s->printDir,
                  "write each combination's resolved spec to DIR/<run>.yaml and DIR/runs.txt; run nothing");
  cmd->add_flag("--overwrite", s->overwrite, "replace existing result files of the runs");
  cmd->add_flag("--slurm", s->slurm, "submit one Slurm job array, one task per combination (srun exprun run)");
  cmd->add_option("--partition", s->partition, "--slurm: the partition (sbatch --partition)");
  cmd->add_option("--time", s->time, "--slurm: each task's time limit (sbatch --time, e.g. 4:00:00)");
  cmd->add_option("--nodes", s->nodes, "--slurm: nodes per task (default 1)")->check(CLI::PositiveNumber);
  cmd->add_option("--ntasks-per-node", s->tasksPerNode, "--slurm: ranks per node (default: --gpus-per-node, else 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpus-per-node", s->gpusPerNode, "--slurm: GPUs per node, one rank each")->check(CLI::NonNegativeNumber);
  cmd->add_option("--signal-s", s->signalS,
                  "--slurm: seconds before the time limit when Slurm sends SIGUSR1 (save, requeue; default 90)")
      ->check(CLI::Range(10, 3600));
  cmd->add_option("--sbatch-arg", s->sbatchArgs, "--slurm: one more #SBATCH line, e.g. --sbatch-arg=--mem=16G (repeatable)");
  cmd->add_flag("--dry-run", s->dryRun, "--slurm: write and print the job script, submit nothing");
  cmd->add_flag("--wait", s->wait, "--slurm: wait for the array to finish, then write the report");
  cmd->add_option("--status", s->statusDir, "the state of the Slurm array submitted into DIR (no SPEC)");
  return {cmd, [=] { return cmdSweep(*s); }};
}

Command peakCommand(CLI::App& app) {
  struct Args {
    std::string device = "cpu", precision = "fp32";
    int threads = 0;
    bool refresh = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("peak", "measure the device's peak GEMM FLOP/s (cached when steady) beside the rule-based peak MFU uses");
  cmd->add_option("--device", a->device, "cpu or cuda (default: cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--precision", a->precision, "fp32, bf16 or fp16 (default: fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--threads", a->threads, "intra-op CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--refresh", a->refresh, "measure again and replace the cached figure");
  return {cmd, [=] { return cmdPeak(a->device, a->precision, a->threads, a->refresh); }};
}

Command tuneCommand(CLI::App& app) {
  auto a = std::make_shared<TuneArgs>();
  auto* cmd = app.add_subcommand(
      "tune", "find the fastest configuration of SPEC on this machine by measuring short runs at its global batch "
              "(process layout, precision, channels_last, micro-batch x accumulation, ...)");
  cmd->add_option("spec", a->spec, "experiment YAML")->required();
  cmd->add_option("--set", a->sets, "override a spec key under every trial, e.g. --set data.train_limit=4096");
  cmd->add_option("--time-budget", a->timeBudget, "wall time of the whole search, e.g. 90s, 5min (default 5min)");
  auto* mem = cmd->add_option("--memory-budget", a->memoryBudget, "peak memory per process, e.g. 4GiB (CPU: resident set)");
  cmd->add_option("--device-memory", a->deviceMemory, "memory per device, e.g. 24GiB (CUDA)")->excludes(mem);
  cmd->add_option("--nproc", a->nproc, "processes the spec is written for (its global batch; default 1)");
  cmd->add_option("--max-procs", a->maxProcs, "CPU: try layouts of up to this many processes (default: the CPU threads)");
  cmd->add_option("--precisions", a->precisions, "precisions to try, e.g. fp32,bf16 (default: fp32 and the native ones)");
  cmd->add_flag("--allow-lossy-comm", a->allowLossyComm, "also try gradient compression (bf16/fp16 comm hooks)");
  cmd->add_option("--write", a->write, "write the winner as a spec that base:s SPEC");
  cmd->add_option("--json", a->jsonOut, "write every trial as JSON");
  cmd->add_option("--work", a->workDir, "keep the trials' files in this folder");
  cmd->add_flag("--keep", a->keep, "keep the temporary folder of the trials");
  return {cmd, [=] { return cmdTune(*a); }};
}

Command pluginsCommand(CLI::App& app) {
  auto kind = std::make_shared<std::string>();
  auto markdown = std::make_shared<bool>(false), json = std::make_shared<bool>(false);
  std::string kinds;
  for (const auto& k : Catalog::instance().kinds()) kinds += (kinds.empty() ? "" : ", ") + k;
  auto* cmd = app.add_subcommand("plugins", "list registered plugins and their options");
  cmd->add_option("kind", *kind, "only this kind (" + kinds + ")");
  auto* md = cmd->add_flag("--markdown", *markdown, "the option reference of every section and plugin (docs/reference.md)");
  cmd->add_flag("--json", *json, "the plugins and their option declarations as JSON")->excludes(md);
  return {cmd, [=] {
            return cmdPlugins(*kind, *markdown ? PluginsFormat::Markdown : *json ? PluginsFormat::Json : PluginsFormat::Text);
          }};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exprun: declarative data-parallel training experiments on LibTorch"};
  app.set_version_flag("--version", std::string("exprun ") + EXPRUN_VERSION + " (" + EXPRUN_GIT_COMMIT + ")");
  app.require_subcommand(1);
  const std::vector<Command> commands{runCommand(app),    profileCommand(app), validateCommand(app), launchCommand(app),
                                      exportCommand(app), planCommand(app),     projectCommand(app),
                                      reportCommand(app), sweepCommand(app),    peakCommand(app),
                                      tuneCommand(app),   pluginsCommand(app), prepareTextCommand(app),
                                      sampleCommand(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kExitOk : kExitBadInput;
  }
  for (const auto& [cmd, run] : commands)
    if (*cmd) return run();
  return kExitBadInput;
}
