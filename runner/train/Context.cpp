// Purpose: what a run's methods see of it (see Context.h).
#include "runner/train/Context.h"

#include "runner/nn/KeepRandomState.h"
#include "runner/train/Evaluate.h"
#include "runner/util/Log.h"

namespace exprun {

std::shared_ptr<Model> TrainContext::freshModel() {
  KeepRandomState keep;
  return build<ModelKind>(s_.spec().model, s_.data->info());
}

void TrainContext::modelChanged(const StepFlops& flops) {
  reshapeLearner(s_.learner, s_.spec(), dist_, s_.settings.batch.lr);
  s_.measures.flops = flops;
}

void TrainContext::dataChanged() {
  const std::int64_t size = s_.data->trainSize();
  KeepRandomState keep;
  std::shared_ptr<Model> m = freshModel();
  s_.measures.flops = countStepFlops(*m, s_.data->info().channels, size, size, [&](torch::Tensor x) { return m->forward(x); });
}

EvalResult TrainContext::evaluate(const Forward& forward) { return exprun::evaluate(s_, dist_, forward); }

void TrainContext::compareModel(CompressedModel r) {
  log::info(strf("%-18s params %10lld  FLOPs/image %.3g  %8.2f MB  Top-1 %s  images/s batch 1: %.0f, batch 64: %.0f",
                 r.model.c_str(), static_cast<long long>(r.params), r.flopsPerImage, r.bytes / 1e6,
                 r.top1 < 0 ? "-" : strf("%.2f %%", r.top1).c_str(), r.imagesPerSB1, r.imagesPerSB64));
  result_.compression.push_back(std::move(r));
}

}  // namespace exprun
