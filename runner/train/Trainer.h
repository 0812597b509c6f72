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
#include <functional>
#include <memory>
#include <string>

#include "runner/checkpoint/Checkpointer.h"
#include "runner/dist/Dist.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/Spec.h"

namespace exprun {

class Model;

// Set by SIGINT/SIGTERM/SIGUSR1: the trainer stops after the current step (all ranks at the same
// one), saving a checkpoint when checkpoints are on.
std::atomic<bool>& stopRequested();
// The signal that asked for the stop (SIGINT, SIGTERM or SIGUSR1; 0: none).
std::atomic<int>& stopSignal();

// How a stopped run ends, from the signal all ranks agreed on (SIGUSR1 over SIGTERM over SIGINT):
// the result file's status and its last attempt's end ("interrupted", "requeued", "cancelled").
// Called on rank 0 before the stop's checkpoint; the default says "interrupted".
using StopStatus = std::function<std::string(int signal)>;

struct TrainOutcome {
  nlohmann::json result;     // the result file's content (runner/results/ResultFile.h)
  bool interrupted = false;  // stopped by a signal before the last epoch
  int stopSignal = 0;        // the signal agreed on, when interrupted
  std::string status;        // the result file's status
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
  void setStopStatus(StopStatus f) { stopStatus_ = std::move(f); }
  // This attempt's Slurm job (SLURM_JOB_ID), for the result file's attempts.
  void setSlurmJob(std::string id) { slurmJob_ = std::move(id); }

 private:
  Spec spec_;
  ResumeRequest resume_;
  StopStatus stopStatus_;
  std::string slurmJob_;
  Dist* dist_ = nullptr;
};

}  // namespace exprun
