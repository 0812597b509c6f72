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

void TrainContext::modelReshaped(const StepFlops& flops) {
  reshapeParts(s_.parts, s_.spec(), dist_, s_.settings.batch.lr);
  s_.facts.flops = flops;
}

void TrainContext::setTrainSize(std::int64_t size) {
  s_.data->setTrainSize(size);
  KeepRandomState keep;
  std::shared_ptr<Model> m = freshModel();
  s_.facts.flops = countStepFlops(*m, s_.data->info().channels, size, size, [&](torch::Tensor x) { return m->forward(x); });
}

EvalResult TrainContext::evaluate(const Forward& forward) { return exprun::evaluate(s_, dist_, forward); }

std::function<std::optional<torch::Tensor>()> TrainContext::fixedTrainingImages(std::int64_t batches) {
  LoaderOptions o = s_.settings.trainLoader;
  o.rank = 0;
  o.worldSize = 1;
  o.workers = 0;
  o.epoch = 1;
  o.startSample = 0;
  o.repeats = 1;
  auto loader = std::make_shared<BatchLoader>(*s_.data, Split::Train, o);
  auto left = std::make_shared<std::int64_t>(batches);
  return [loader, left]() -> std::optional<torch::Tensor> {
    if ((*left)-- <= 0) return std::nullopt;
    auto b = loader->next();
    if (!b) return std::nullopt;
    return b->x;
  };
}

void TrainContext::compareModel(CompressedModel r) {
  log::info(strf("%-18s params %10lld  FLOPs/image %.3g  %8.2f MB  Top-1 %s  images/s batch 1: %.0f, batch 64: %.0f",
                 r.model.c_str(), static_cast<long long>(r.params), r.flopsPerImage, r.bytes / 1e6,
                 r.top1 < 0 ? "-" : strf("%.2f %%", r.top1).c_str(), r.imagesPerSB1, r.imagesPerSB64));
  result_.compression.push_back(std::move(r));
}

}  // namespace exprun
