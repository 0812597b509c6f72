// Purpose: one training step — the lines that train. Zero the gradients, run the micro-batches
// (autocast forward, cross-entropy, scaled backward; all but the last under no_sync), finish the
// gradient exchange, apply the non-finite policy, then unscale → clip → optimizer step if finite →
// update the loss scale, and the EMA. The run's methods see each micro-batch, its loss and the
// optimizer step. The trainer and the memory planner run this same step.
// Rule: on a GPU the step does not wait for the device: its sums and the fp32 abort check stay there
// (StepSums, verify()) until a log line, a checkpoint or the epoch's end reads them.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>

#include "runner/api/Method.h"
#include "runner/step/Learner.h"
#include "runner/step/Position.h"
#include "runner/step/StepGraph.h"

namespace exprun {

// The training loss: cross-entropy (in float32) with label smoothing; `targets` are class indices
// (int64 [N]) or class probabilities (float [N, classes], mixup's), smoothed as PyTorch's
// cross_entropy smooths them: (1 - s) p + s / classes.
torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing);

struct StepOutcome {
  bool stepped = false;    // false: inf/NaN gradients, the step was skipped (true: the device decided)
  torch::Tensor gradNorm;  // before clipping (a scalar on the gradients' device); undefined when the host
                           // skipped the step, 0 when the device did
};
// One optimizer step after the gradients are reduced: unscale -> clip -> step if finite ->
// update the loss scale. `knownNorm`: the gradients' L2 norm when the caller computed it already (fp32).
// `overRanks`: sharding's group — `params` are this rank's shards, the norm and the found-inf flag
// are every rank's.
// With loss scaling and an optimizer that skips on the device (SkipsOnDevice: SGD's fused kernel),
// "if finite" is decided there, without waiting for the device; the norm of a skipped step is 0.
StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler, const std::vector<torch::Tensor>& params,
                          double clipNorm, double clipValue, const torch::Tensor& knownNorm = {},
                          const std::function<void()>& beforeUpdate = {}, Dist* overRanks = nullptr);

// train.on_nonfinite: abort, with the step and the first non-finite tensor.
class NonFiniteError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An epoch's sums that the steps add to on the device: the training loss (over samples), the
// correct predictions and the gradient norms. Read into EpochMeters only when needed.
struct StepSums {
  torch::Tensor lossSum, correct, normSum;  // float64, int64, float64 scalars
  // GradSums on `device` starting from `m`'s (an epoch resumed mid-way).
  static StepSums from(const EpochMeters& m, const torch::Device& device);
  // Copies the sums into `m` (waits for the device).
  void into(EpochMeters& m) const;
};

// The epoch's meters `m` of every rank, reduced (collective: every rank calls it).
EpochTotals totalsOverRanks(const EpochMeters& m, Dist& dist);

class TrainStep {
 public:
  // `methods`: the run's (runner/api/Method.h), told of every micro-batch, its loss and the
  // optimizer step; null for none (the planner's probes).
  TrainStep(Learner& learner, const Numerics& numerics, const StepRules& rules, Dist& dist,
            const torch::Device& device, Methods* methods = nullptr);
  // Optimizer step `step` (0-based) of `epoch` over the next `group` micro-batches that `next`
  // gives; adds what it measures to `sums` and `meters` (samples, communication) and a skipped
  // step to `position`.
  void run(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
           StepSums& sums, EpochMeters& meters, TrainPosition& position);
  // Throws NonFiniteError for a non-finite step the device recorded (deferred checks); otherwise
  // nothing. `now`: the steps done, for the message.
  void verify(std::int64_t now);
  // Keep the fp32 abort check on the device (the default on a GPU) or answer it at every step.
  // Deferred, the steps after a non-finite one are applied up to the next verify(), which names the
  // first such step, its loss and tensor; on the CPU, where waiting costs nothing, the check is
  // immediate and nothing non-finite is applied. Answered by the host at every step whatever this
  // says: fp16 with an optimizer that does not skip on the device (per_param, foreach) and
  // `on_nonfinite: skip`.
  void deferChecks(bool defer) { defer_ = defer; }
  // train.cuda_graph: from now on the step is captured once and replayed (StepGraph.h); the run was
  // checked with whyNoCudaGraph.
  void useCudaGraph();
  const StepGraph* graph() const { return graph_.get(); }
  // The last step's training loss on this rank, summed over its samples, and the samples: a
  // float64 pair on the device (LiveMetrics sums them over the ranks for the per-step files).
  const torch::Tensor& lastLoss() const { return lastLoss_; }

 private:
  // The group the step's norms and flags are reduced over: sharding's (null without).
  Dist* shardedOver() const { return learner_.reducer->sharded() ? &dist_ : nullptr; }
  // fp32: false when the step's loss or gradients are not finite on some rank (then skip it, or
  // throw NonFiniteError, or record it for verify()); sets `norm` to the gradients' norm.
  bool finiteEverywhere(const torch::Tensor& stepLoss, std::int64_t step, std::int64_t epoch, torch::Tensor& norm);
  // A step's losses so far: the sum of its micro-batches' mean losses, and of their losses over
  // their samples (float64 on the device), and its samples.
  struct MicroSums {
    torch::Tensor loss, lossSum;
    std::int64_t samples = 0;
  };
  void microBatch(const std::function<Batch()>& next, std::int64_t g, std::int64_t group, std::int64_t step,
                  std::int64_t epoch, StepSums& sums, EpochMeters& meters, MicroSums& acc);
  StepBatch fetch(const std::function<Batch()>& next, std::int64_t g, std::int64_t step, std::int64_t epoch);
  // Forward, loss and backward of micro-batch `b`; its loss sum and correct predictions added to
  // `lossSum` and `correct` (the epoch's sums, or a graph's outputs), its samples to `meters`.
  void compute(StepBatch& b, std::int64_t group, const torch::Tensor& lossSum, const torch::Tensor& correct,
               EpochMeters& meters, MicroSums& acc);
  void zeroGrads();
  // After the micro-batches: the gradient exchange, the non-finite check, the optimizer step (its
  // gradient norm added to `normSum`).
  void finish(MicroSums& acc, std::int64_t bytesBefore, std::int64_t step, std::int64_t epoch,
              const torch::Tensor& normSum, EpochMeters& meters, TrainPosition& position);
  void afterOptimizer(std::int64_t step);
  // run() with train.cuda_graph.
  void runGraphed(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
                  StepSums& sums, EpochMeters& meters, TrainPosition& position);
  std::string firstNonFiniteTensor(const torch::Tensor& badParam) const;

  Learner& learner_;
  const Numerics& numerics_;
  const StepRules& rules_;
  Dist& dist_;
  torch::Device device_;
  Methods* methods_;
  bool defer_;
  torch::Tensor lastLoss_;
  // The first non-finite step the device saw (-1: none), its epoch, loss and first bad parameter.
  torch::Tensor badStep_, badEpoch_, badLoss_, badParam_;
  torch::Tensor stepNow_, epochNow_;  // the step and epoch, on the device (the deferred check's record)
  std::unique_ptr<StepGraph> graph_;
};

}  // namespace exprun
