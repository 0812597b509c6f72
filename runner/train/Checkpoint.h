// Purpose: what a checkpoint (saved training state) holds, and how it is saved and restored,
// collectively by every rank: rank 0 writes the model, optimizer, loss scaler and EMA tensors
// (state.bin) and meta.json (the resolved spec, position, world size, the result file's epochs so
// far); every rank writes its RNG states (CPU, and CUDA when used), its batch-norm buffers, EMA,
// comm hook state and partial-epoch meters (rank-NNNNN.bin). Saving commits atomically
// (CheckpointStore); loading reads and verifies every file first, agrees across ranks on which
// checkpoint is usable (falling back to older ones when the newest is damaged), then restores.
// When to save is the Checkpointer's business (runner/train/Checkpointer.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"
#include "runner/train/CheckpointStore.h"
#include "runner/train/Parts.h"
#include "runner/train/Progress.h"

namespace exprun {

// Collective: every rank calls it at the same step. Returns the committed folder. Throws
// CheckpointError (nothing committed) when a weight is not finite or a rank cannot write.
// `info`: the data shape the model was built for (export rebuilds the model from it). `result`:
// the result file so far (its epochs and evaluations are kept in the checkpoint).
std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const Spec& spec, const DataInfo& info,
                           TrainParts& parts, const Progress& mine, const nlohmann::json& result,
                           const torch::Device& device);

struct Restored {
  std::string path;
  Progress progress;  // this rank's
  nlohmann::json resultEpochs;
  nlohmann::json resultEvals;  // empty in checkpoints older than evaluations inside epochs
};

// Collective. `what`: a checkpoint folder, or a checkpoint root (its newest usable checkpoint),
// or "auto" (the spec's checkpoint root; nullopt when it holds none). A spec that differs from the
// checkpoint's is refused with the differing keys unless `force`. Throws CheckpointError.
std::optional<Restored> restoreCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist,
                                          const Spec& spec, TrainParts& parts, bool force, const torch::Device& device);

// The checkpoint root of a spec: output.checkpoint.dir, or <output dir>/<name>.ckpt.
std::string checkpointRoot(const Spec& spec, const std::string& outDir);

// A tensor's raw bytes (a contiguous CPU copy), as checkpoints and safetensors files store them.
std::string tensorBytes(const torch::Tensor& t);

}  // namespace exprun
