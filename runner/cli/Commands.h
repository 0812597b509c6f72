// Purpose: what the `exprun` subcommands do, callable from the CLI layer (main.cpp) and from tests.
// Each returns the process exit code (runner/util/ExitCodes.h): 0 success, 2 bad input (nothing
// trained or written), 130 interrupted (results of the completed epochs written), 1 unexpected
// failure; what a failure prints and returns is decided in one place (runner/cli/Errors.h).
// Training and planning commands: Commands.cpp; report, sweep and plugins: ReportCommands.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/dist/Launcher.h"
#include "runner/util/ExitCodes.h"

namespace exprun {

struct RunArgs {
  std::string spec;
  std::vector<std::string> sets;
  std::string outDir;  // empty: the spec's output.dir
  bool overwrite = false;
  std::string resume;  // "", "auto", or a checkpoint folder / root
  bool force = false;  // resume although the spec differs from the checkpoint's
};

int cmdRun(const RunArgs& args);
// `exprun run` of `start` + `steps` optimizer steps without evaluation, the last `steps` under the
// profiler (train.profile), into <out> (default: <output.dir>/profile), replacing what is there.
int cmdProfile(RunArgs args, std::int64_t start, std::int64_t steps);
// Writes a checkpoint's weights (raw or EMA) as safetensors with torchvision's key names.
int cmdExport(const std::string& checkpoint, const std::string& format, const std::string& out, bool ema);
int cmdValidate(const std::string& spec, const std::vector<std::string>& sets);
// `exprun prepare-text INPUT OUTDIR`: character-level tokens (runner/data/CharText.h).
int cmdPrepareText(const std::string& input, const std::string& outDir);
// `exprun sample CHECKPOINT`: text from a character-level language model (temperature, top-k).
struct SampleArgs {
  std::string checkpoint, prompt = "\n", meta;
  std::int64_t tokens = 200, topK = 200, seed = 1337;
  double temperature = 0.8;
  bool ema = false;
};
int cmdSample(const SampleArgs& a);
// Lists the plugins of `kind` (empty: every kind, and the fixed sections) with their options; as a
// Markdown reference (docs/reference.md) or as JSON (the catalog, e.g. for the spec fuzzer).
enum class PluginsFormat { Text, Markdown, Json };
int cmdPlugins(const std::string& kind, PluginsFormat format = PluginsFormat::Text);
// Prints the device's peak GEMM FLOP/s for a precision (measured once per host, then cached).
int cmdPeak(const std::string& device, const std::string& precision, int threads, bool refresh);
struct PlanArgs {
  std::string spec;
  std::vector<std::string> sets;
  std::int64_t globalBatch = 0;  // 0: the spec's
  std::string budget;            // --memory-budget: plan on this machine's device by probing
  // --for cuda: estimate for devices this machine does not have (runner/plan/MemoryEstimate.h)
  std::string forDevice;
  std::string deviceMemory;      // per device, e.g. 24GiB
  int gpus = 1;
  std::string context = "512MiB", workspace = "256MiB";
  double fragmentation = 0.10;
  std::vector<std::int64_t> probeBatches{8, 16, 32};
  std::string jsonOut;           // also write the plan as JSON here
};
// Plans micro-batch and accumulation for a memory budget (runner/plan/Planner.h), or estimates
// the memory on a CUDA device from a CPU machine (--for cuda).
int cmdPlan(const PlanArgs& args);

struct ProjectArgs {
  std::vector<std::string> specs;
  std::vector<int> gpus{1};                 // one per spec, or one for all
  std::vector<std::string> sets;            // applied to every spec
  std::string device = "rtx3090";
  std::vector<std::string> calibrateOn{"v100-sxm2-16gb", "a100-sxm4-80gb"};
  std::int64_t images = 1281167;
  double linkGbps = 25.8;
  std::string jsonOut, mdOut;               // also write the projection here
};
// Projects memory per device and epoch time on CUDA devices (runner/plan/Projection.h).
int cmdProject(const ProjectArgs& args);

// Per-epoch table of a result file's JSON, as printed at the end of `exprun run`.
std::string epochTable(const std::string& resultJson);

struct ReportArgs {
  std::vector<std::string> files;
  std::string baseline;
  std::string format = "md";
  std::string output;  // empty: stdout
};
// `exprun report` (runner/report/Report.h): 2 for a bad file, an unknown baseline or format, an
// unwritable output.
int cmdReport(const ReportArgs& args);

struct SweepArgs {
  std::string spec;
  std::vector<std::string> grids;
  std::vector<std::string> sets;
  std::string outDir;
  std::string printDir;  // non-empty: write the specs there, run nothing
  int launch = 0;        // > 0: each run through `exprun launch --nproc-per-node N`
  bool overwrite = false;
  std::string exe;  // the exprun executable for the runs (default: this process's, /proc/self/exe)
  // --slurm: one Slurm job array (runner/report/SlurmSweep.h) instead of runs one after the other.
  bool slurm = false;
  std::string partition, time;
  int nodes = 1, tasksPerNode = 0, gpusPerNode = 0, signalS = 90;
  std::vector<std::string> sbatchArgs;
  bool dryRun = false;    // print the job script (written too), submit nothing
  bool wait = false;      // after submitting, wait for the array and write the report
  std::string statusDir;  // --status DIR: the recorded array's state
};
// `exprun sweep` (runner/report/Sweep.h): 0 when every run succeeded, 2 for bad input (nothing
// run), 1 when a run failed (the others still ran and the report covers them), 130 when interrupted.
int cmdSweep(const SweepArgs& args);

struct TuneArgs {
  std::string spec;
  std::vector<std::string> sets;
  std::string timeBudget = "5min";
  std::string memoryBudget, deviceMemory;  // per process (CPU: peak resident set; CUDA: per device)
  int nproc = 1;                           // processes the spec is written for
  int maxProcs = 0;                        // CPU layouts up to this many processes (0: the CPU threads)
  std::string precisions;                  // e.g. "fp32,bf16" (empty: fp32 and the native ones)
  bool allowLossyComm = false;
  std::string write, jsonOut;              // the tuned spec; every trial as JSON
  std::string workDir;                     // the trials' files (default: a temporary folder, removed)
  bool keep = false;                       // keep the temporary folder
  std::string exe;                         // the exprun executable of the trials (default: this one)
};
// `exprun tune` (runner/tune/Tune.h): 0 with a winner, 2 for bad input (a budget too small for one
// trial, an unknown precision, a spec that does not validate), 1 when no trial ran, 130 when interrupted.
int cmdTune(const TuneArgs& args);

// `exprun launch` (runner/dist/Launcher.h): `launch` with the workers' `run` arguments.
int cmdLaunch(LaunchArgs launch, const RunArgs& run);

}  // namespace exprun
