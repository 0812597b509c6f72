// Purpose: the training loop as the algorithm reads: set up → restore → for each epoch { for each
// step { stop requested? → train one step → log → checkpoint policy } → end the epoch (meters
// reduced over ranks, evaluation, memory, record, result file written atomically, checkpoint) }.
// The verbs live in their own files: Setup (device, plan, plugins, loaders, schedule), Step (one
// optimizer step), Epoch (an epoch in progress and its end), Checkpointer (when to save, restore).
// Single process, or one rank of a data-parallel run; rank 0 writes the result file.
#pragma once

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"
#include "runner/checkpoint/Checkpointer.h"
#include "runner/step/Step.h"

namespace exprun {

// Set by SIGINT/SIGTERM: the trainer stops after the current step.
std::atomic<bool>& stopRequested();

struct TrainOutcome {
  nlohmann::json result;     // the result file's content
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
