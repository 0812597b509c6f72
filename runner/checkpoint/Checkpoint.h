// Purpose: what a checkpoint (saved training state) holds, and how it is saved and restored,
// collectively by every rank: rank 0 writes the model, optimizer, loss scaler and EMA tensors
// (state.bin) and meta.json (runner/checkpoint/Meta.h); every rank writes its own RNG states,
// batch-norm buffers, EMA, comm hook state and partial-epoch meters (rank-NNNNN.bin). When to save
// is the Checkpointer's business (Checkpointer.h).
// Rule: saving commits atomically (CheckpointStore); loading verifies every file and the ranks agree
// on a usable checkpoint before anything is restored.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "runner/api/Method.h"
#include "runner/checkpoint/CheckpointStore.h"
#include "runner/checkpoint/Meta.h"
#include "runner/dist/Dist.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/Spec.h"
#include "runner/step/Learner.h"
#include "runner/step/Position.h"

namespace exprun {

// What a run's checkpoints save and restore, once the run is set up: the spec as trained, the shape
// of the data the model was built for (export rebuilds the model from it), the learner (model,
// optimizer, scaler, EMA, reducer), the device and the batching, and the spec's methods: each saves
// its state as its own entry (meta.json's "methods": {"<type>": ...}) and gets it back, with the
// run's context, before the checkpoint's tensors are read (a method that changes the model's shapes
// applies them then).
struct CheckpointContent {
  const Spec* spec = nullptr;
  DataInfo data;
  Learner* learner = nullptr;
  torch::Device device{torch::kCPU};
  BatchShape batch;
  bool planned = false;  // batch_size: auto (the memory plan's choices are exprun's, not the spec's)
  Methods* methods = nullptr;
  RunContext* context = nullptr;
};

// Collective: every rank calls it at the same step. Returns the committed folder. Throws
// CheckpointError (nothing committed) when a weight is not finite or a rank cannot write.
// `result`: the result file so far (its records are kept in the checkpoint). meta.json also gets
// rank 0's progress and the epoch's meters over all ranks, which a run resumed on another number
// of ranks starts from.
std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const CheckpointContent& run,
                           const Progress& mine, const ResultFile& result);

// A checkpoint chosen for resuming, its files read and verified on every rank. Read before the run
// is set up: its world size and global batch decide the accumulation of a run resumed on another
// number of ranks.
struct CheckpointFiles {
  std::string path;
  CheckpointMeta meta;
  std::string state;  // state.bin
  std::string rank;   // this rank's rank-NNNNN.bin; empty when the world size differs (not read)
  int worldSize() const { return meta.worldSize; }
  // The checkpoint's batching (older checkpoints: from their spec; lr and steps per epoch 0 there).
  BatchShape shape() const { return meta.shape(path); }
  // Whether the accumulation is exprun's choice rather than the spec's when resuming on
  // `worldSize` ranks: another world size, or a checkpoint of a run resumed on another one.
  bool accumulationChosen(int worldSize) const;
};

// Collective. `what`: a checkpoint folder, or a checkpoint root (its newest usable checkpoint),
// or "auto" (the store's; nullopt when it holds none). Falls back to older checkpoints, all ranks
// together, when the newest is damaged. Throws CheckpointError. The checkpoint restores on the same
// number of ranks exactly, or on another (the global batch kept by the accumulation, the epoch
// re-sharded from the sample it stopped at: runner/checkpoint/WorldSize.h).
std::optional<CheckpointFiles> findCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist);

struct Restored {
  std::string path;
  Progress progress;  // this rank's
  RunHistory history;  // the result file's records as the checkpoint kept them (attempts: the last as it stood)
  std::optional<WorldSizeChange> change;  // this resumption's, when the world size differs
};

// Collective. Restores `files` into `run` (set up with specForWorldSize's spec). A spec that differs
// from the checkpoint's is refused with the differing keys unless `force` (train.accumulate aside
// when exprun chose it; the memory plan's keys too when a planned run changed world size). The same
// world size: every rank gets its own state back (RNG, batch-norm buffers, EMA, comm hook state,
// partial-epoch meters), bitwise. Another world size: runner/checkpoint/WorldSize.h. Throws
// CheckpointError.
Restored restoreCheckpoint(const CheckpointFiles& files, Dist& dist, const CheckpointContent& run, bool force);

// A tensor's raw bytes (a contiguous CPU copy), as checkpoints and safetensors files store them.
std::string tensorBytes(const torch::Tensor& t);
// Bytes as a uint8 tensor (what an archive stores them as), and back with tensorBytes.
torch::Tensor bytesTensor(const std::string& s);
// An archive as the bytes a checkpoint file holds, and those bytes read back (on the CPU).
std::string archiveBytes(torch::serialize::OutputArchive& a);
torch::serialize::InputArchive archiveFrom(const std::string& bytes);

// The default generator of `device` (CPU or CUDA), whose state a checkpoint saves per rank.
at::Generator generatorFor(const torch::Device& device);

}  // namespace exprun
