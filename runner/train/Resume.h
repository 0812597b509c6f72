// Purpose: what a training checkpoint holds and how it is saved and restored, for every rank:
// rank 0 writes the model, optimizer, loss scaler and EMA tensors (state.bin) and meta.json (the
// resolved spec, step counters, world size, the result file's epochs so far); every rank writes
// its RNG states (CPU, and CUDA when used) and its partial-epoch meters (rank-NNNNN.bin). Saving
// is collective and commits atomically (CheckpointStore); loading reads and verifies every file
// first, agrees across ranks on which checkpoint is usable (falling back to older ones when the
// newest is damaged), then restores. Also the safetensors export of a checkpoint's weights.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runner/dist/Dist.h"
#include "runner/registry/Plugins.h"
#include "runner/spec/Spec.h"
#include "runner/train/CheckpointStore.h"

namespace exprun {

class GradScaler;
class Ema;

// Where training stands, and this rank's meters of the unfinished epoch.
struct TrainProgress {
  std::int64_t step = 0;        // optimizer steps done
  std::int64_t epoch = 1;       // the epoch in progress (1-based)
  std::int64_t micro = 0;       // micro-batches of that epoch consumed
  std::int64_t epochSteps = 0;  // optimizer steps of that epoch
  double lossSum = 0, normSum = 0, commWait = 0, dataWait = 0, elapsed = 0;
  std::int64_t correct = 0, samples = 0, skippedImages = 0, nonFiniteSkipped = 0, scalerSkipped = 0;
  nlohmann::json toJson() const;
  static TrainProgress fromJson(const nlohmann::json& j);
};

struct TrainParts {
  Model& model;
  torch::optim::Optimizer& optimizer;
  GradScaler& scaler;
  Ema* ema;  // null when EMA is off
};

// Collective: every rank calls it at the same step. Returns the committed folder.
// Throws CheckpointError (nothing committed) when a weight is not finite.
// `info`: the data shape the model was built for (export rebuilds the model from it).
std::string saveCheckpoint(const CheckpointStore& store, int keep, Dist& dist, const Spec& spec, const DataInfo& info,
                           TrainParts parts, const TrainProgress& mine, const nlohmann::json& resultEpochs,
                           const torch::Device& device);

struct Restored {
  std::string path;
  TrainProgress progress;
  nlohmann::json resultEpochs;
};

// Collective. `what`: a checkpoint folder, or a checkpoint root (its newest usable checkpoint),
// or "auto" (the spec's checkpoint root; nullopt when it holds none). A spec that differs from the
// checkpoint's is refused with the differing keys unless `force`. Throws CheckpointError.
std::optional<Restored> restoreCheckpoint(const std::string& what, const CheckpointStore& store, Dist& dist,
                                          const Spec& spec, TrainParts parts, bool force, const torch::Device& device);

// The checkpoint root of a spec: output.checkpoint.dir, or <output dir>/<name>.ckpt.
std::string checkpointRoot(const Spec& spec, const std::string& outDir);

// Writes a checkpoint's model weights (or its EMA weights) as safetensors with the model's
// state-dict names. `what` as for restoreCheckpoint (a folder or a root). Throws CheckpointError.
void exportSafetensors(const std::string& what, const std::string& outPath, bool ema);

// Safetensors file of named tensors (CPU, contiguous copies are made), sorted by name.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const nlohmann::json& metadata);

}  // namespace exprun
