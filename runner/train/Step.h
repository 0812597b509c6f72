// Purpose: one training step — the lines that train. Zero the gradients (in place when they are
// views into the comm buckets), run the step's micro-batches (autocast forward, cross-entropy,
// scaled backward; every micro-batch but the last under no_sync), finish the gradient exchange,
// apply the non-finite policy (fp32: agree over ranks, abort naming the tensor or skip), then
// allreduce → unscale → clip → optimizer step if finite → update the loss scale, and the EMA.
// The trainer and the memory planner run this same step.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>

#include "runner/train/Parts.h"
#include "runner/train/Progress.h"

namespace exprun {

// The training loss: cross-entropy (in float32) with label smoothing.
torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing);

struct StepOutcome {
  bool stepped = false;  // false: inf/NaN gradients, the step was skipped
  double gradNorm = 0;   // before clipping
};
// One optimizer step after the gradients are reduced: unscale -> clip -> step if finite ->
// update the loss scale. `knownNorm`: the gradients' L2 norm when the caller computed it already (fp32).
StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                          const std::vector<torch::Tensor>& params, double clipNorm, double clipValue,
                          std::optional<double> knownNorm = std::nullopt);

// train.on_nonfinite: abort, with the step and the first non-finite tensor.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TrainStep {
 public:
  TrainStep(TrainParts& parts, const TrainConfig& train, Dist& dist, const torch::Device& device)
      : parts_(parts), train_(train), dist_(dist), device_(device) {}
  // Optimizer step `step` (0-based) of `epoch` over the next `group` micro-batches that `next`
  // gives; adds what it measures to `meters` (and a skipped step to `position`).
  void run(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
           EpochMeters& meters, TrainPosition& position);

 private:
  // fp32: false when the step's loss or gradients are not finite on some rank (then skip it, or
  // throw NonFiniteError); sets `norm` to the gradients' norm.
  bool finiteEverywhere(double stepLoss, std::int64_t step, std::int64_t epoch, std::optional<double>& norm);

  TrainParts& parts_;
  const TrainConfig& train_;
  Dist& dist_;
  torch::Device device_;
};

}  // namespace exprun
