// Purpose: where training stands — the position (step, epoch, micro-batch; what a checkpoint
// resumes from) and this rank's meters of the epoch in progress (summed as steps run, reduced over
// the ranks by name at the epoch's end, saved in checkpoints so a resumed epoch reports the same
// figures). Torch-free.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

namespace exprun {

struct TrainPosition {
  std::int64_t step = 0;              // optimizer steps done
  std::int64_t epoch = 1;             // the epoch in progress (1-based)
  std::int64_t micro = 0;             // micro-batches of that epoch this rank consumed
  // Positions of that epoch's sample order the ranks consumed together (padding included): where
  // a resumed epoch continues, whatever the number of ranks it resumes on (runner/data/BatchLoader.h).
  std::int64_t sample = 0;
  std::int64_t nonFiniteSkipped = 0;  // steps skipped by train.on_nonfinite: skip, since the start
  std::int64_t scalerSkipped = 0;     // steps the fp16 loss scaler skipped, since the start
  double runSeconds = 0;              // the run clock: wall seconds since the run started (earlier attempts too)
  // Sizes of rank 0's per-step CSV and TensorBoard file as of this position (-1: not kept), so that
  // a resumed run cuts them back and its curves continue without duplicate steps.
  std::int64_t csvBytes = -1, eventBytes = -1;
};

// This rank's figures of the epoch in progress.
struct EpochMeters {
  std::int64_t steps = 0;    // optimizer steps
  double lossSum = 0;        // sum over samples of the training loss
  std::int64_t correct = 0;  // training samples predicted right (Top-1)
  std::int64_t samples = 0;
  double normSum = 0;              // sum over steps of the gradient norm (before clipping)
  double commWait = 0;             // seconds blocked on gradient communication
  double dataWait = 0;             // seconds waiting for batches
  double elapsed = 0;              // seconds of training
  std::int64_t commBytes = 0;      // bytes this rank passed to gradient allreduces
  std::int64_t skippedImages = 0;  // bad images the data plugin replaced
};

struct Progress {
  TrainPosition position;
  EpochMeters meters;
  // One JSON object with both (the checkpoint's per-rank "progress"; older checkpoints lack comm_bytes).
  nlohmann::json toJson() const;
  static Progress fromJson(const nlohmann::json& j);
};

}  // namespace exprun
