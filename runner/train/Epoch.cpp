// Purpose: an epoch in progress and the end of an epoch (see Epoch.h).
#include "runner/train/Epoch.h"

namespace exprun {

EpochRun::EpochRun(TrainSetup& s, const Progress& at)
    : s_(s),
      skippedBefore_(s.data->skippedSamples() - at.meters.skippedImages),
      firstMicro_(at.position.micro),
      meters_(at.meters),
      sums_(StepSums::from(at.meters, s.device)),
      clock_(s.device) {
  resetPeakMemory(s.device);
  LoaderOptions lo = s.trainLoader;
  lo.epoch = at.position.epoch;
  lo.startSample = at.position.sample;
  loader_.emplace(*s.data, Split::Train, lo);  // its threads start preparing batches now
  clock_.reset();
}

std::int64_t EpochRun::microBatches() const { return firstMicro_ + loader_->numBatches(); }

std::int64_t EpochRun::samplePosition(std::int64_t micro) const { return loader_->consumedAfter(micro - firstMicro_); }

std::function<Batch()> EpochRun::batches() {
  return [this] {
    auto batch = loader_->next();
    if (!batch) throw std::logic_error("batch loader ended early");
    return std::move(*batch);
  };
}

double EpochRun::dataWaitSoFar() const { return meters_.dataWait + loader_->waitSeconds(); }

std::int64_t EpochRun::skippedImages() const { return s_.data->skippedSamples() - skippedBefore_; }

Progress EpochRun::progress(const TrainPosition& position) const {
  Progress p{position, meters_};
  sums_.into(p.meters);
  p.meters.elapsed += clock_.seconds();
  p.meters.dataWait += loader_->waitSeconds();
  p.meters.skippedImages = skippedImages();
  p.position.scalerSkipped = s_.parts.scaler->skippedSteps();
  return p;
}

EvalResult evaluate(TrainSetup& s, Dist& dist) {
  torch::NoGradGuard noGrad;
  // Its own autocast region, so that no cast autocast may cache within a region (Python's autocast
  // caches weight casts) outlives the EMA swap between two evaluations.
  AutocastGuard autocast(s.device.type(), autocastDtype(s.spec.train.precision));
  Model& model = *s.parts.model;
  model.eval();
  BatchLoader loader(*s.data, Split::Test, s.evalLoader);
  struct {
    double lossSum = 0, top1 = 0, top5 = 0, samples = 0;
  } c;  // this rank's shard of the test set, then all of it
  while (auto batch = loader.next()) {
    torch::Tensor x = batch->x.to(s.device, /*non_blocking=*/true), y = batch->y.to(s.device, true);
    torch::Tensor out = model.forward(x);
    c.lossSum += torch::nn::functional::cross_entropy(
                     out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                     .item<double>();
    auto hits = topkCorrect(out, y, {1, 5});
    c.top1 += static_cast<double>(hits[0]);
    c.top5 += static_cast<double>(hits[1]);
    c.samples += static_cast<double>(y.size(0));
  }
  model.train();
  dist.sumInPlace({&c.lossSum, &c.top1, &c.top5, &c.samples});
  if (c.samples == 0) return {};
  return EvalResult{c.lossSum / c.samples, 100.0 * c.top1 / c.samples, 100.0 * c.top5 / c.samples};
}

namespace {

// The epoch's figures over all ranks, by name: the slowest rank's times and waits (as a multi-GPU
// table shows them), the largest byte count, and the sums of losses and counts.
struct EpochTotals {
  double seconds, dataWait, commWait, commBytes;  // max over ranks
  double lossSum, correct, samples;               // summed over ranks
};

EpochTotals totalsOverRanks(const EpochMeters& m, Dist& dist) {
  EpochTotals t{m.elapsed,
                m.dataWait,
                m.commWait,
                static_cast<double>(m.commBytes),
                m.lossSum,
                static_cast<double>(m.correct),
                static_cast<double>(m.samples)};
  dist.maxInPlace({&t.seconds, &t.dataWait, &t.commWait, &t.commBytes});
  dist.sumInPlace({&t.lossSum, &t.correct, &t.samples});
  return t;
}

}  // namespace

EpochRecord endEpoch(TrainSetup& s, const EpochRun& run, const TrainPosition& position, double lr, Dist& dist,
                     const std::optional<EvalResult>& evaluated) {
  const Progress now = run.progress(position);
  const EpochMeters& m = now.meters;
  const EpochTotals t = totalsOverRanks(m, dist);
  EpochRecord rec;
  rec.epoch = position.epoch;
  rec.timeS = t.seconds;
  rec.dataWaitS = t.dataWait;
  rec.commWaitS = t.commWait;
  rec.commBytes = static_cast<std::int64_t>(t.commBytes);
  rec.commBytesPerStep = m.steps > 0 ? t.commBytes / static_cast<double>(m.steps) : 0.0;
  rec.steps = m.steps;
  rec.samples = static_cast<std::int64_t>(t.samples);
  rec.imagesPerS = t.samples / std::max(rec.timeS, 1e-9);
  rec.trainLoss = t.samples > 0 ? t.lossSum / t.samples : 0.0;
  rec.trainTop1 = t.samples > 0 ? 100.0 * t.correct / t.samples : 0.0;
  rec.lr = lr;
  rec.gradNorm = m.steps > 0 ? m.normSum / static_cast<double>(m.steps) : 0.0;
  rec.lossScale = s.parts.scaler->scaleValue();
  rec.skippedSteps = s.parts.scaler->skippedSteps() + position.nonFiniteSkipped;
  rec.flopsPerS = s.flops.total * rec.imagesPerS;
  rec.mfu = s.peakFlopsPerS > 0 ? rec.flopsPerS / s.peakFlopsPerS : 0.0;
  if (s.spec.train.eval) {
    const EvalResult ev = evaluated ? *evaluated : evaluate(s, dist);
    rec.valLoss = ev.loss;
    rec.valTop1 = ev.top1;
    rec.valTop5 = ev.top5;
    if (s.parts.ema) {
      s.parts.ema->swap(*s.parts.model);
      rec.valTop1Ema = evaluate(s, dist).top1;
      s.parts.ema->swap(*s.parts.model);
    }
  }
  double skipped = static_cast<double>(run.skippedImages());  // training and evaluation, all ranks
  dist.sumInPlace({&skipped});
  rec.skippedImages = static_cast<std::int64_t>(skipped);
  for (double bytes : dist.gather(static_cast<double>(peakMemoryBytes(s.device))))
    rec.peakMemoryPerRank.push_back(static_cast<std::int64_t>(bytes));
  rec.peakMemoryBytes = *std::max_element(rec.peakMemoryPerRank.begin(), rec.peakMemoryPerRank.end());
  double allocated = static_cast<double>(peakAllocatedBytes(s.device));  // -1 where not measured
  dist.maxInPlace({&allocated});
  rec.peakAllocatedBytes = static_cast<std::int64_t>(allocated);
  return rec;
}

}  // namespace exprun
