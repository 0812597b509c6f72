// Purpose: building the learner (see runner/step/Learner.h).
#include "runner/step/Learner.h"

#include <algorithm>

#include "runner/step/Device.h"

namespace exprun {

std::shared_ptr<Model> buildModel(const Spec& spec) {
  return build<ModelKind>(spec.model, build<DataKind>(spec.data)->info());
}

StepFlops countSpecFlops(const Spec& spec) {
  const DataInfo info = build<DataKind>(spec.data)->info();
  std::shared_ptr<Model> model = build<ModelKind>(spec.model, info);
  const std::unique_ptr<Task> task = build<TaskKind>(spec.task);
  const Batch probe = task->probe(info, 2);  // 2: batch norm in training mode needs more than one value
  return countStepFlops(*model, probe.x, task->units(probe.y), [&](torch::Tensor x) { return model->forward(x); },
                        [&](const torch::Tensor& out) { return task->loss(out, probe.y, torch::Tensor(), 0.0); });
}

std::vector<std::string> recomputedStages(const std::vector<std::string>& wanted, const Model& model,
                                          const std::string& modelType) {
  const auto valid = model.stages();
  std::vector<std::string> chosen;
  for (const auto& w : wanted) {
    if (w == "all") {
      chosen = valid;
      continue;
    }
    if (w == "none") continue;
    if (std::find(valid.begin(), valid.end(), w) == valid.end()) {
      std::string list;
      for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
      throw std::invalid_argument("train.activation_checkpointing: model '" + modelType + "' has no stage '" + w +
                                  "'; valid: " + (list.empty() ? std::string("(none)") : list) + ", all, none");
    }
    if (std::find(chosen.begin(), chosen.end(), w) == chosen.end()) chosen.push_back(w);
  }
  return chosen;
}

Learner buildLearner(const Spec& spec, const DataInfo& info, const torch::Device& device, Dist& dist, double lr) {
  const Numerics& n = spec.train.numerics;
  Learner p;
  p.task = build<TaskKind>(spec.task);
  p.model = build<ModelKind>(spec.model, info);
  p.model->to(device);
  p.model->setRecomputed(recomputedStages(n.activationCheckpointing, *p.model, spec.model.type()),
                         n.activationCheckpointingEvery);
  if (n.channelsLast) weightsToChannelsLast(*p.model);
  dist.broadcastModel(*p.model);  // every rank starts from rank 0's weights
  checkPrecisionSupported(n.precision, device);
  p.scaler = std::make_unique<GradScaler>(n.precision == Precision::Fp16, device);
  reshapeLearner(p, spec, dist, lr);
  return p;
}

void reshapeLearner(Learner& p, const Spec& spec, Dist& dist, double lr) {
  // The old reducer first: its hooks hold the parameters' gradient accumulators, which remember
  // the old shapes; released, they are made afresh for the new ones.
  p.reducer.reset();
  const ShardStage stage = shardStageNamed(spec.distributed.shard);
  std::unique_ptr<CommHook> hook = build<CommKind>(spec.distributed.comm);
  if (stage != ShardStage::None && dist.active()) {
    if (!hook->plainAverage())
      throw std::invalid_argument("distributed.comm: '" + spec.distributed.comm.type() +
                                  "' cannot run with distributed.shard: " + spec.distributed.shard +
                                  " (sharding reduce-scatters the plain average; use allreduce or "
                                  "allreduce_after_backward)");
    if (spec.train.execution.cudaGraph)
      throw std::invalid_argument("train.cuda_graph cannot run with distributed.shard: " + spec.distributed.shard);
  }
  p.reducer = std::make_unique<GradReducer>(std::move(hook), dist, stage);  // idle for one process
  p.reducer->attach(*p.model);
  const double emaDecay = spec.train.rules.emaDecay;
  p.ema = emaDecay > 0 ? std::make_unique<Ema>(*p.model, emaDecay) : nullptr;
  // What the optimizer steps: the parameters, or under sharding this rank's rows of them.
  const NamedParameters stepped = p.reducer->sharded() ? p.reducer->shards() : trainableParameters(*p.model);
  p.params = stepped.values();
  p.optimizer = build<OptimizerKind>(spec.optimizer, stepped, lr);
}

}  // namespace exprun
