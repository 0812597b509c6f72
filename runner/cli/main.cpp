// Purpose: the `exprun` executable: CLI11 subcommands only; all logic lives in the library (App.h).
#include <CLI/CLI.hpp>

#include <iostream>

#include "runner/Version.h"
#include "runner/cli/Commands.h"
#include "runner/dist/Launcher.h"
#include "runner/report/Report.h"
#include "runner/report/Sweep.h"
#include "runner/util/Log.h"

namespace {
// The options `run` and `launch` share (launch forwards them to its workers); returns --resume.
CLI::Option* addRunOptions(CLI::App* cmd, exprun::RunArgs& args, const std::string& resumeHelp) {
  cmd->add_option("spec", args.spec, "experiment spec (YAML)")->required();
  cmd->add_option("--set", args.sets, "override a spec value: key.path=value (repeatable)");
  cmd->add_option("--out", args.outDir, "directory of the result file (default: the spec's output.dir)");
  cmd->add_flag("--overwrite", args.overwrite, "replace an existing result file");
  auto* resume = cmd->add_option("--resume", args.resume, resumeHelp)->expected(0, 1);
  cmd->add_flag("--force", args.force, "resume although the spec differs from the checkpoint's");
  return resume;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"exprun: declarative data-parallel training experiments on LibTorch"};
  app.set_version_flag("--version", std::string("exprun ") + EXPRUN_VERSION + " (" + EXPRUN_GIT_COMMIT + ")");
  app.require_subcommand(1);

  exprun::RunArgs run;
  auto* runCmd = app.add_subcommand("run", "train SPEC and write <out>/<name>.json");
  auto* runResume =
      addRunOptions(runCmd, run, "continue from a checkpoint: auto (the newest in the spec's checkpoint folder) or a path");

  std::string validateSpec;
  std::vector<std::string> validateSets;
  auto* validateCmd = app.add_subcommand("validate", "print the fully resolved spec and the model's parameter count");
  validateCmd->add_option("spec", validateSpec, "experiment spec (YAML)")->required();
  validateCmd->add_option("--set", validateSets, "override a spec value: key.path=value (repeatable)");

  exprun::LaunchArgs launch;
  exprun::RunArgs launchRun;
  auto* launchCmd = app.add_subcommand(
      "launch", "start data-parallel workers of `exprun run` on this node (torchrun's variables)");
  launchCmd->add_option("--nproc-per-node", launch.nprocPerNode, "workers on this node")->check(CLI::PositiveNumber);
  launchCmd->add_option("--nnodes", launch.nnodes, "nodes in the job")->check(CLI::PositiveNumber);
  launchCmd->add_option("--node-rank", launch.nodeRank, "this node's index in [0, nnodes)")->check(CLI::NonNegativeNumber);
  launchCmd->add_option("--master-addr", launch.masterAddr, "host of rank 0 (node 0)");
  launchCmd->add_option("--master-port", launch.masterPort, "port of the rendezvous store (default: a free port on one node, 29500 on several)")
      ->check(CLI::Range(0, 65535));
  launchCmd->add_option("--max-restarts", launch.maxRestarts, "restart all workers up to K times after a failure")
      ->check(CLI::NonNegativeNumber);
  launchCmd->add_option("--grace-s", launch.graceS, "seconds between SIGTERM and SIGKILL when stopping workers");
  launchCmd->add_option("--worker-exe", launch.exe, "run workers with this executable (a wrapper script, a debugger) instead of this exprun");
  auto* launchResume =
      addRunOptions(launchCmd, launchRun, "continue from a checkpoint: auto or a path (restarts imply auto)");

  std::string exportCkpt, exportFormat = "safetensors", exportOut;
  bool exportEma = false;
  auto* exportCmd = app.add_subcommand("export", "write a checkpoint's weights for other tools (safetensors, torchvision key names)");
  exportCmd->add_option("checkpoint", exportCkpt, "checkpoint folder (step-*) or checkpoint root (its newest)")->required();
  exportCmd->add_option("--format", exportFormat, "output format (safetensors)");
  exportCmd->add_option("-o,--output", exportOut, "output file")->required();
  exportCmd->add_flag("--ema", exportEma, "the EMA weights instead of the raw ones");

  exprun::PlanArgs plan;
  auto* planCmd = app.add_subcommand(
      "plan", "find the micro-batch and accumulation that fit a memory budget here (--memory-budget), or estimate "
              "them for CUDA cards this machine does not have (--for cuda --device-memory)");
  planCmd->add_option("spec", plan.spec, "experiment spec (YAML)")->required();
  auto* budgetOpt = planCmd->add_option("--memory-budget", plan.budget, "per-process memory budget here, e.g. 20GiB");
  auto* forOpt = planCmd->add_option("--for", plan.forDevice, "estimate for this kind of card instead (cuda)")
                     ->check(CLI::IsMember({"cuda"}));
  auto* memOpt = planCmd->add_option("--device-memory", plan.deviceMemory, "memory of one card, e.g. 24GiB (with --for)");
  forOpt->needs(memOpt);
  memOpt->needs(forOpt);
  budgetOpt->excludes(forOpt);
  planCmd->add_option("--gpus", plan.gpus, "cards the global batch is spread over (with --for; default 1)")
      ->check(CLI::PositiveNumber)->needs(forOpt);
  planCmd->add_option("--global-batch", plan.globalBatch, "target global batch (default: train.global_batch, else batch x processes x accumulate)");
  planCmd->add_option("--cuda-context", plan.context, "allowance for the CUDA context and libraries (default 512MiB)")->needs(forOpt);
  planCmd->add_option("--workspace", plan.workspace, "allowance for cuDNN/cuBLAS workspaces (default 256MiB)")->needs(forOpt);
  planCmd->add_option("--fragmentation", plan.fragmentation, "allocator fragmentation, a fraction of the allocated bytes (default 0.10)")
      ->check(CLI::Range(0.0, 1.0))->needs(forOpt);
  planCmd->add_option("--probe-batches", plan.probeBatches, "micro-batches measured for the estimate (default 8 16 32; doubled until linear)")
      ->check(CLI::PositiveNumber)->needs(forOpt);
  planCmd->add_option("--json", plan.jsonOut, "also write the plan as JSON to this file");
  planCmd->add_option("--set", plan.sets, "override a spec value: key.path=value (repeatable)");

  exprun::ProjectArgs project;
  auto* projectCmd = app.add_subcommand(
      "project", "project memory per card and epoch time on CUDA cards this machine does not have (a projection, "
                 "from published peaks and throughputs; see runner/plan/Projection.h)");
  projectCmd->add_option("specs", project.specs, "experiment specs (YAML)")->required();
  projectCmd->add_option("--gpus", project.gpus, "cards per spec: one count for all, or one per spec (default 1)")
      ->check(CLI::PositiveNumber);
  projectCmd->add_option("--card", project.card, "the card projected on (default rtx3090)");
  projectCmd->add_option("--calibrate", project.calibrateOn,
                         "cards whose published ResNet-50 throughput calibrates the efficiency (default v100-sxm2-16gb a100-sxm4-80gb)");
  projectCmd->add_option("--images", project.images, "training images per epoch (default 1281167, ILSVRC-2012)")
      ->check(CLI::PositiveNumber);
  projectCmd->add_option("--link-gbps", project.linkGbps, "allreduce bus bandwidth between cards, GB/s (default 25.8)")
      ->check(CLI::PositiveNumber);
  projectCmd->add_option("--json", project.jsonOut, "also write the projection as JSON to this file");
  projectCmd->add_option("--md", project.mdOut, "also write the Markdown to this file");
  projectCmd->add_option("--set", project.sets, "override a spec value in every spec: key.path=value (repeatable)");

  exprun::ReportArgs report;
  auto* reportCmd = app.add_subcommand("report", "compare result files: table (md, csv, json) or HTML page with charts");
  reportCmd->add_option("results", report.files, "result files (JSON, schema 1)")->required();
  reportCmd->add_option("--baseline", report.baseline, "run name the speed-ups refer to (default: the first file's)");
  reportCmd->add_option("--format", report.format, "md, csv, html or json (default: md)")
      ->check(CLI::IsMember({"md", "csv", "html", "json"}));
  reportCmd->add_option("-o,--output", report.output, "write to FILE (atomically) instead of stdout");

  exprun::SweepArgs sweep;
  auto* sweepCmd = app.add_subcommand(
      "sweep", "run SPEC once per combination of the grids (cartesian product), then report on all the runs");
  sweepCmd->add_option("spec", sweep.spec, "experiment spec (YAML)")->required();
  sweepCmd->add_option("--grid", sweep.grids, "key.path=v1,v2,... (repeatable; the first grid varies slowest)")
      ->required();
  sweepCmd->add_option("--set", sweep.sets, "override a spec value for every run: key.path=value (repeatable)");
  sweepCmd->add_option("--out", sweep.outDir, "directory of the result files and report (default: the spec's output.dir)");
  sweepCmd->add_option("--launch", sweep.launch, "run each combination through `exprun launch --nproc-per-node N`")
      ->check(CLI::PositiveNumber);
  sweepCmd->add_option("--print", sweep.printDir, "write each combination's resolved spec to DIR/<run>.yaml and DIR/runs.txt; run nothing");
  sweepCmd->add_flag("--overwrite", sweep.overwrite, "replace existing result files of the runs");

  std::string peakDevice = "cpu", peakPrecision = "fp32";
  int peakThreads = 0;
  bool peakRefresh = false;
  auto* peakCmd = app.add_subcommand("peak", "measure (once per host, then cached) the device's peak GEMM FLOP/s, MFU's denominator");
  peakCmd->add_option("--device", peakDevice, "cpu or cuda (default: cpu)")->check(CLI::IsMember({"cpu", "cuda"}));
  peakCmd->add_option("--precision", peakPrecision, "fp32, bf16 or fp16 (default: fp32)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  peakCmd->add_option("--threads", peakThreads, "intra-op CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
  peakCmd->add_flag("--refresh", peakRefresh, "measure again and replace the cached figure");

  std::string kind;
  auto* pluginsCmd = app.add_subcommand("plugins", "list registered plugins and their options");
  pluginsCmd->add_option("kind", kind, "only this kind (model, data, optimizer, scheduler)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : exprun::kExitBadInput;
  }
  // --resume without a value means auto.
  if (runResume->count() > 0 && run.resume.empty()) run.resume = "auto";
  if (launchResume->count() > 0 && launchRun.resume.empty()) launchRun.resume = "auto";
  if (*runCmd) return exprun::cmdRun(run);
  if (*validateCmd) return exprun::cmdValidate(validateSpec, validateSets);
  if (*pluginsCmd) return exprun::cmdPlugins(kind);
  if (*peakCmd) return exprun::cmdPeak(peakDevice, peakPrecision, peakThreads, peakRefresh);
  if (*exportCmd) return exprun::cmdExport(exportCkpt, exportFormat, exportOut, exportEma);
  if (*reportCmd) return exprun::cmdReport(report);
  if (*sweepCmd) return exprun::cmdSweep(sweep);
  if (*planCmd) return exprun::cmdPlan(plan);
  if (*projectCmd) return exprun::cmdProject(project);
  if (*launchCmd) {
    launch.workerArgs = {"run", launchRun.spec};
    for (const auto& s : launchRun.sets) launch.workerArgs.insert(launch.workerArgs.end(), {"--set", s});
    if (!launchRun.outDir.empty()) launch.workerArgs.insert(launch.workerArgs.end(), {"--out", launchRun.outDir});
    if (launchRun.overwrite) launch.workerArgs.push_back("--overwrite");
    if (!launchRun.resume.empty()) launch.workerArgs.insert(launch.workerArgs.end(), {"--resume", launchRun.resume});
    if (launchRun.force) launch.workerArgs.push_back("--force");
    try {
      return exprun::launchWorkers(launch);
    } catch (const std::invalid_argument& e) {
      exprun::log::error(std::string("launch: ") + e.what());
      return exprun::kExitBadInput;
    } catch (const std::exception& e) {
      exprun::log::error(e.what());
      return exprun::kExitFailure;
    }
  }
  return exprun::kExitBadInput;
}
