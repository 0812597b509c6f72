// Purpose: one evaluation on the test split (see Evaluate.h).
#include "runner/train/Evaluate.h"

#include "runner/metrics/Meters.h"
#include "runner/step/Feed.h"

namespace exprun {

EvalResult evaluate(TrainSetup& s, Dist& dist, const Forward& forward) {
  torch::NoGradGuard noGrad;
  const torch::Device device = s.settings.device;
  // Its own autocast region, so that no cast autocast may cache within a region (Python's autocast
  // caches weight casts) outlives the EMA swap between two evaluations.
  AutocastGuard autocast(device.type(), autocastDtype(s.spec().train.numerics.precision));
  Model& model = *s.learner.model;
  model.eval();
  BatchLoader loader(*s.data, Split::Test, s.settings.evalLoader);
  DeviceFeed feed(loader, device, /*channelsLast=*/false, static_cast<int>(s.spec().train.execution.copyAhead));
  struct {
    double lossSum = 0, top1 = 0, top5 = 0, samples = 0;
  } c;  // this rank's shard of the test set, then all of it
  // The sums stay on the device while the batches go by (no host read per batch), read once after.
  torch::Tensor lossSum, hits;
  while (auto batch = feed.next()) {
    const torch::Tensor &x = batch->x, &y = batch->y;
    torch::Tensor out = forward ? forward(x) : s.methods.forward(x, model);
    const EvalSums sums = s.learner.task->evalSums(out, y);
    lossSum = lossSum.defined() ? lossSum + sums.lossSum : sums.lossSum;
    hits = hits.defined() ? hits + sums.hits : sums.hits;
    c.samples += static_cast<double>(sums.units);
  }
  if (lossSum.defined()) {
    c.lossSum = lossSum.item<double>();
    const torch::Tensor h = hits.cpu();
    c.top1 = static_cast<double>(h[0].item<std::int64_t>());
    c.top5 = static_cast<double>(h[1].item<std::int64_t>());
  }
  model.train();
  dist.sumInPlace({&c.lossSum, &c.top1, &c.top5, &c.samples});
  if (c.samples == 0) return {};
  return EvalResult{c.lossSum / c.samples, 100.0 * c.top1 / c.samples, 100.0 * c.top5 / c.samples};
}

}  // namespace exprun
