// Purpose: where training stands (Progress) — the position (step, epoch, micro-batch, sample; what
// a checkpoint resumes from) and this rank's meters of the epoch in progress (summed as steps run,
// reduced over the ranks by name at the epoch's end, saved in checkpoints so that a resumed epoch
// reports the same figures). Torch-free.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "runner/metrics/Breakdown.h"
#include "runner/util/JsonFields.h"

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

  // After an optimizer step over `microBatches` micro-batches, which ends at position `sampleAfter`
  // of the epoch's order.
  void advance(std::int64_t microBatches, std::int64_t sampleAfter) {
    micro += microBatches;
    sample = sampleAfter;
    ++step;
  }
  // The next epoch begins, at run clock `now`; `scalerSkippedSoFar`: the loss scaler's count.
  void beginNextEpoch(std::int64_t scalerSkippedSoFar, double now) {
    ++epoch;
    micro = 0;
    sample = 0;
    scalerSkipped = scalerSkippedSoFar;
    runSeconds = now;
  }
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
  PhaseSeconds phases{};           // the step breakdown: seconds in each phase (runner/metrics/Breakdown.h)
  double commInFlight = 0;         // seconds the gradient exchange was in flight (first bucket -> finished)
};

// The epoch's meters over all ranks, reduced as the epoch's end reduces them: sums of the counts,
// maxima of the times (the slowest rank's, as a multi-GPU table shows them) and byte counts
// (totalsOverRanks, runner/step/Step.h).
struct EpochTotals {
  double lossSum = 0, correct = 0, samples = 0, skippedImages = 0;  // summed over ranks
  double elapsed = 0, dataWait = 0, commWait = 0, commBytes = 0;    // max over ranks
};

struct Progress {
  TrainPosition position;
  EpochMeters meters;
  // The next epoch begins: the position moves on, the meters start afresh.
  void beginNextEpoch(std::int64_t scalerSkippedSoFar, double now) {
    position.beginNextEpoch(scalerSkippedSoFar, now);
    meters = EpochMeters{};
  }
  // One JSON object with both (the checkpoint's per-rank "progress"; older checkpoints lack
  // comm_bytes, sample, the run clock, the file sizes and the phases).
  nlohmann::json toJson() const;
  static Progress fromJson(const JsonFields& j);
};

}  // namespace exprun
