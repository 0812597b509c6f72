// Purpose: what the `exprun` subcommands do, callable from the CLI layer and from tests.
// Each returns the process exit code: 0 success, 2 bad input (nothing trained or written),
// 130 interrupted (results of the completed epochs written), 1 unexpected failure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exprun {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitInterrupted = 130;

struct RunArgs {
  std::string spec;
  std::vector<std::string> sets;
  std::string outDir;  // empty: the spec's output.dir
  bool overwrite = false;
  std::string resume;  // "", "auto", or a checkpoint folder / root
  bool force = false;  // resume although the spec differs from the checkpoint's
};

int cmdRun(const RunArgs& args);
// Writes a checkpoint's weights (raw or EMA) as safetensors with torchvision's key names.
int cmdExport(const std::string& checkpoint, const std::string& format, const std::string& out, bool ema);
int cmdValidate(const std::string& spec, const std::vector<std::string>& sets);
int cmdPlugins(const std::string& kind);  // empty: every kind
// Prints the device's peak GEMM FLOP/s for a precision (measured once per host, then cached).
int cmdPeak(const std::string& device, const std::string& precision, int threads, bool refresh);
// Plans micro-batch and accumulation for a memory budget (see runner/train/Planner.h).
int cmdPlan(const std::string& spec, const std::vector<std::string>& sets, const std::string& budget,
            std::int64_t globalBatch);

// Per-epoch table of a result file's JSON, as printed at the end of `exprun run`.
std::string epochTable(const std::string& resultJson);

}  // namespace exprun
