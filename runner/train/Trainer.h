// Purpose: the training loop as the algorithm reads: set up → restore → for each epoch { for each
// step { stop requested? → train one step → outputs → evaluation due? → checkpoint policy } → end
// the epoch (meters reduced over ranks, evaluation, memory, record, result file, checkpoint) }.
// The verbs live in their own files: Setup (device, plan, plugins, loaders, schedule), TrainStep
// (one optimizer step, runner/step/Step.h), EpochRun (an epoch in progress and its end),
// Evaluations, Checkpointer (when to save, restore: runner/checkpoint/), Outputs (log lines, bar,
// per-step files, result file: runner/live/). Single process, or one rank of a data-parallel run;
// rank 0 writes the result file.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "runner/checkpoint/Checkpointer.h"
#include "runner/dist/Dist.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/Spec.h"

namespace exprun {

class Model;

// Set by SIGINT/SIGTERM: the trainer stops after the current step.
std::atomic<bool>& stopRequested();

struct TrainOutcome {
  nlohmann::json result;     // the result file's content (runner/results/ResultFile.h)
  bool interrupted = false;  // stopped by a signal before the last epoch
  std::shared_ptr<Model> model;
};

class Trainer {
 public:
  // Single process.
  explicit Trainer(Spec spec) : spec_(std::move(spec)) {}
  // One rank of a data-parallel run (dist joined already).
  Trainer(Spec spec, Dist* dist) : spec_(std::move(spec)), dist_(dist) {}
  // Trains the spec. When resultPath is not empty, rank 0 (re)writes the result file there after
  // every epoch and at the end. Throws DataError / DistError / CheckpointError / NonFiniteError /
  // std::invalid_argument / std::exception on failures.
  TrainOutcome run(const std::string& resultPath);
  void setResume(ResumeRequest r) { resume_ = std::move(r); }

 private:
  Spec spec_;
  ResumeRequest resume_;
  Dist* dist_ = nullptr;
};

}  // namespace exprun
