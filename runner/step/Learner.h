// Purpose: the learner — the model and everything that steps it in training: optimizer, fp16 loss
// scaler, EMA, and the gradient reducer with the spec's comm hook. Built one way for the trainer
// and for the memory planner's probes, so a plan measures what the run allocates; saved and
// restored whole by a checkpoint.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runner/api/Model.h"
#include "runner/api/Optimizer.h"
#include "runner/api/Task.h"
#include "runner/metrics/Flops.h"
#include "runner/nn/Autocast.h"
#include "runner/spec/Spec.h"
#include "runner/step/Ema.h"
#include "runner/step/GradReducer.h"
#include "runner/step/GradScaler.h"

namespace exprun {

struct Learner {
  std::shared_ptr<Model> model;
  std::shared_ptr<Task> task;  // what the model learns: the loss and the metrics' counts
  std::unique_ptr<GradReducer> reducer;  // the bucket engine, running the spec's comm hook
  std::unique_ptr<GradScaler> scaler;
  std::unique_ptr<Ema> ema;  // null when EMA is off
  std::unique_ptr<Optimizer> optimizer;
  std::vector<torch::Tensor> params;  // what the optimizer steps: the trainable parameters, or their shards (distributed.shard)
};

// The model for `info` on `device` with its recomputed stages and (channels_last) NHWC weights,
// rank 0's weights on every rank, the comm hook attached, the loss scaler (fp16), the EMA, and the
// optimizer at learning rate `lr`. Throws std::invalid_argument for stages the model lacks or a
// precision the device cannot run.
Learner buildLearner(const Spec& spec, const DataInfo& info, const torch::Device& device, Dist& dist, double lr);

// After the model's tensors changed shape (channels pruned, or widths restored from a checkpoint):
// the optimizer (its state starts afresh), the gradient reducer's buckets, the EMA (restarting
// from the model's weights now) and the parameter list, rebuilt for the new shapes.
void reshapeLearner(Learner& learner, const Spec& spec, Dist& dist, double lr);

// The spec's model alone, for its data plugin's shape (no data is read; `exprun validate`, export).
std::shared_ptr<Model> buildModel(const Spec& spec);

// FLOPs per unit (image, token: the task's) of one training step of the spec's model on its task's
// probe batch, counted on a model of its own (runner/metrics/Flops.h); consumes the global random
// generator.
StepFlops countSpecFlops(const Spec& spec);

// train.activation_checkpointing resolved against the model's stages: [all], [none] or names.
std::vector<std::string> recomputedStages(const std::vector<std::string>& wanted, const Model& model,
                                          const std::string& modelType);

}  // namespace exprun
