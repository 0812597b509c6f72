// Purpose: a profiled window of a run (train.profile, `exprun profile`) and what it measures: the
// Kineto profiler's trace over the window's optimizer steps, with the loop's phases as user scopes
// (runner/metrics/Phases.h); the memory timeline of the window's first step; and the per-module
// table (moduleTable), as DeepSpeed's flops profiler shows it. What it found goes to the result
// file's "profile" section (rank 0's).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/api/Model.h"
#include "runner/spec/Sections.h"

namespace exprun {

// LibTorch's Kineto profiler over the window's optimizer steps (CPU and, on a GPU, CUDA activities;
// input shapes and memory), the Chrome/Perfetto trace written as <name>.trace.json (rank r > 0:
// <name>.rank<r>.trace.json; gzipped with train.profile.gzip); and the memory timeline of the
// window's first step: live tensor bytes after every operator, with the phase it ran in (the CPU
// tracking allocator's figure, CUDA's caching allocator's).
class ProfileWindow {
 public:
  // `tracePath`: where the trace goes (empty: the run writes no files: no trace).
  ProfileWindow(const ProfileConfig& config, std::string tracePath, const torch::Device& device);
  ~ProfileWindow();
  ProfileWindow(const ProfileWindow&) = delete;
  ProfileWindow& operator=(const ProfileWindow&) = delete;
  bool on() const { return config_.steps > 0; }
  // Step `step` (0-based: the optimizer steps done) is about to run / has run.
  void beforeStep(std::int64_t step);
  void afterStep(std::int64_t step);
  bool done() const { return done_; }
  // "window", "trace", "memory_timeline" (after the window; null before).
  nlohmann::json figures() const;

 private:
  void stop();
  struct Timeline;
  ProfileConfig config_;
  std::string tracePath_;
  torch::Device device_;
  bool active_ = false, done_ = false;
  std::int64_t firstStep_ = -1, lastStep_ = -1;
  std::unique_ptr<Timeline> timeline_;
  nlohmann::json timelineJson_;
  std::string written_;  // the trace's path once written
};

// On a GPU: the CUDA caching allocator's snapshot (segments and their blocks: sizes, allocated or
// free, active) written to `path` as JSON, for an out-of-memory error to name; returns false where
// there is no CUDA (nothing is written).
bool writeCudaMemorySnapshot(const std::string& path);

// One row of the per-module table: a module (a ModelGraph node: its state-dict name; operations
// without weights are named after their block, "layer1.0.relu") or a stage (the modules whose
// names share a first component: "layer1"), timed alone on a batch of `batch` images in train mode:
// forward and backward seconds (median of repeats), the FLOPs counted for both (per image), the
// FLOP/s that makes against the device's peak, its parameters, and the activation bytes its
// forward keeps for backward (its output included: what the allocator holds after the forward).
struct ModuleRow {
  std::string name, op;  // op: conv, batch_norm, relu, max_pool, avg_pool, linear, add, ...; "stage"
  std::int64_t params = 0;
  double flopsPerImage = 0;  // forward + backward
  double forwardS = 0, backwardS = 0;
  double flopsPerS = 0, peakFraction = 0;  // peakFraction: 0 when the peak is unknown
  std::int64_t activationBytes = 0;
};
struct ModuleTable {
  std::vector<ModuleRow> modules, stages;
  std::int64_t batch = 0;
  std::string note;  // why there is no table (a model without a graph)
};
// `model`: a throwaway model (its batch-norm statistics and gradients change); `peakFlopsPerS`:
// one device's peak (0: unknown); `amp`: the run's autocast dtype, if any.
ModuleTable moduleTable(Model& model, const torch::Device& device, std::int64_t batch, std::int64_t channels,
                        std::int64_t height, std::int64_t width, double peakFlopsPerS,
                        std::optional<at::ScalarType> amp, int repeats = 3);
nlohmann::json moduleTableJson(const ModuleTable& t);
// The table printed: the stages, then the `top` modules by forward + backward time.
std::string formatModuleTable(const ModuleTable& t, std::size_t top = 10);

}  // namespace exprun
