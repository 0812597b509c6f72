// Purpose: when checkpoints are saved and where from they are restored — the checkpoint policy of
// a run: the store (output.checkpoint.dir or <output dir>/<name>.ckpt), the intervals
// (every_steps, every_epochs), how many to keep, a save when a stop is requested, and restoring
// for --resume / restarted workers. Each save is logged with its size and time.
#pragma once

#include <memory>

#include <functional>
#include <optional>
#include <string>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/FolderLock.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"

namespace exprun {

// Where to resume from: "" (start fresh), "auto" (the newest checkpoint of the spec's checkpoint
// root, if any), or a checkpoint folder / root. `force` accepts a spec that differs.
struct ResumeRequest {
  std::string what;
  bool force = false;
};

class Checkpointer {
 public:
  // Before the run is set up (collective): the checkpoint root of the run (RunPaths), its lock when this run saves checkpoints or resumes (one run per folder;
  // CheckpointError naming the other run otherwise), and the checkpoint `request` designates, read
  // and verified on every rank ("auto" finding none: start from the beginning).
  Checkpointer(const Spec& spec, Dist& dist, const RunPaths& paths, const ResumeRequest& request);
  // The spec to set the run up with: `spec`, or with the accumulation that keeps the checkpoint's
  // global batch on this run's number of ranks (specForWorldSize).
  Spec specToTrain(const Spec& spec) const;
  // After the set-up, before training: restores the learner, this rank's progress and the result's
  // earlier records when resuming (nullopt: start from the beginning). From here on the checkpoints
  // this run saves hold `run` and `result` (both must outlive the Checkpointer).
  std::optional<Restored> begin(const CheckpointContent& run, const ResultFile& result);
  // After optimizer step `step` (1-based count): saves when every_steps divides it.
  void afterStep(std::int64_t step, const std::function<Progress()>& now);
  // After the end of `epoch`: saves when every_epochs divides it (`next`: the next epoch's start).
  void afterEpoch(std::int64_t epoch, const Progress& next);
  // A stop was requested mid-epoch: saves where training stands, when checkpoints are on or
  // `always` (a Slurm requeue: the next attempt resumes from it).
  void onStop(const Progress& now, bool always = false);
  // The checkpoint a `--resume auto` would continue from ("" when none is committed).
  std::string newest() const;

 private:
  void save(const Progress& at);
  // Rank 0 takes the folder's lock (FolderLock); every rank throws CheckpointError if it cannot.
  void lockFolder(bool force);

  Dist& dist_;
  CheckpointConfig config_;
  ResumeRequest request_;
  CheckpointStore store_;
  std::unique_ptr<FolderLock> lock_;  // rank 0, while checkpoints are saved or resumed from
  std::optional<CheckpointFiles> found_;  // the checkpoint to resume from
  std::optional<CheckpointContent> run_;  // from begin() on
  const ResultFile* result_ = nullptr;
};

}  // namespace exprun
