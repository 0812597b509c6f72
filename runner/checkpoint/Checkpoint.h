// Purpose: what a checkpoint (saved training state) holds, and how it is saved and restored,
// collectively by every rank: rank 0 writes the model, optimizer, loss scaler and EMA tensors
// (state.bin) and meta.json (the resolved spec, position, world size, the result file's epochs so
// far); every rank writes its RNG states (CPU, and CUDA when used), its batch-norm buffers, EMA,
// comm hook state and partial-epoch meters (rank-NNNNN.bin). Saving commits atomically
// (CheckpointStore); loading reads and verifies every file first, agrees across ranks on which
// checkpoint is usable (falling back to older ones when the newest is damaged), then restores —
// on the same number of ranks exactly, or on another (the global batch kept by the accumulation,
// the epoch re-sharded from the sample it stopped at).
// When to save is the Checkpointer's business (runner/checkpoint/Checkpointer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"
#include "runner/checkpoint/CheckpointStore.h"
#include "runner/step/Parts.h"
#include "runner/step/Position.h"

namespace exprun {

// How the run batches: what a checkpoint records so that a run resumed on another number of ranks
// can keep its global batch (micro-batch x ranks x accumulation).
struct BatchShape {
  std::int64_t microBatch = 0, accumulate = 1, globalBatch = 0, stepsPerEpoch = 0;
  double lr = 0;  // scaled to the global batch
};

// Collective: every rank calls it at the same step. Returns the committed folder. Throws
// CheckpointError (nothing committed) when a weight is not finite or a rank cannot write.
// `info`: the data shape the model was built for (export rebuilds the model from it). `result`:
// the result file so far (its epochs, evaluations and world-size changes are kept in the
// checkpoint). meta.json also gets rank 0's progress and the epoch's meters over all ranks, which
// a run resumed on another number of ranks starts from.
std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const Spec& spec, const DataInfo& info,
                           TrainParts& parts, const Progress& mine, const nlohmann::json& result,
                           const torch::Device& device, const BatchShape& shape = {});

// A checkpoint chosen for resuming, its files read and verified on every rank. Read before the run
// is set up: its world size and global batch decide the accumulation of a run resumed on another
// number of ranks.
struct CheckpointFiles {
  std::string path;
  nlohmann::json meta;
  std::string state;  // state.bin
  std::string rank;   // this rank's rank-NNNNN.bin; empty when the world size differs (not read)
  int worldSize() const { return meta.at("world_size").get<int>(); }
  // The checkpoint's batching (older checkpoints: from their spec; lr and steps per epoch 0 there).
  BatchShape shape() const;
  // Whether the accumulation is exprun's choice rather than the spec's when resuming on
  // `worldSize` ranks: another world size, or a checkpoint of a run resumed on another one.
  bool accumulationChosen(int worldSize) const;
};

// Collective. `what`: a checkpoint folder, or a checkpoint root (its newest usable checkpoint),
// or "auto" (the store's; nullopt when it holds none). Falls back to older checkpoints, all ranks
// together, when the newest is damaged. Throws CheckpointError.
std::optional<CheckpointFiles> findCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist);

// The spec to resume `files` with on `worldSize` ranks. The same world size as a run that never
// changed it: `spec`. Otherwise (another world size, or a checkpoint of a run resumed on another
// one): the checkpoint's global batch is kept by changing train.accumulate (the micro-batch stays)
// when worldSize x micro-batch divides it; otherwise CheckpointError lists the world sizes that
// keep it, unless `force` (then the global batch changes; the learning rate follows it by the
// spec's rule). batch_size: auto: the memory planner chooses, for train.global_batch, as always.
Spec specForWorldSize(const CheckpointFiles& files, const Spec& spec, int worldSize, bool force);

// Resuming on another number of ranks, as the result file records it.
struct WorldSizeChange {
  std::int64_t step = 0, epoch = 0, sample = 0;  // where (sample: position in the epoch's order)
  int fromWorld = 0, toWorld = 0;
  BatchShape from, to;
  bool forced = false;          // the global batch changed (--force)
  bool commStateReset = false;  // the comm hook's per-rank state (PowerSGD) started afresh
  std::string checkpoint;
  nlohmann::json toJson() const;
};

struct Restored {
  std::string path;
  Progress progress;  // this rank's
  nlohmann::json resultEpochs;
  nlohmann::json resultEvals;         // empty in checkpoints older than evaluations inside epochs
  nlohmann::json worldSizeChanges;    // earlier ones, from the checkpoint's result file
  std::optional<WorldSizeChange> change;  // this resumption's, when the world size differs
};

// Collective. Restores `files` into `parts` (set up with specForWorldSize's spec, batching `now`;
// `planned`: batch_size: auto). A spec that differs from the checkpoint's is refused with the
// differing keys unless `force` (train.accumulate aside when exprun chose it; the memory plan's
// keys too when a planned run changed world size). The same world size: every rank gets its
// own state back (RNG, batch-norm buffers, EMA, comm hook state, partial-epoch meters), bitwise.
// Another world size: the model, optimizer, loss scaler, EMA and buffers are rank 0's; the
// epoch's meters are the old ranks' totals (rank 0 carries the sums); the position continues at
// the same sample of the epoch's order (the step count re-expressed in steps of the new global
// batch when it changed: Checkpointer::begin); per-rank RNG streams are re-derived from
// (seed, step, rank); a comm hook's per-rank state starts afresh. Throws CheckpointError.
Restored restoreCheckpoint(const CheckpointFiles& files, Dist& dist, const Spec& spec, TrainParts& parts, bool force,
                           const torch::Device& device, const BatchShape& now, bool planned = false);

// The checkpoint root of a spec: output.checkpoint.dir, or <output dir>/<name>.ckpt.
std::string checkpointRoot(const Spec& spec, const std::string& outDir);

// A tensor's raw bytes (a contiguous CPU copy), as checkpoints and safetensors files store them.
std::string tensorBytes(const torch::Tensor& t);

}  // namespace exprun
