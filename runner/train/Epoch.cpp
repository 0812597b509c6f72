// Purpose: an epoch in progress and the end of an epoch (see Epoch.h).
#include "runner/train/Epoch.h"

#include "runner/train/Evaluate.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {
// An MFU above 1 is not a measurement: the peak is wrong for this device. Warned about once a run
// (rank 0); logs, result files and reports show it as "> 100 % (peak unknown)".
void warnIfAbovePeak(TrainSetup& s, const EpochRecord& rec, int rank) {
  if (rec.mfu <= 1 || s.warnedAbovePeak) return;
  s.warnedAbovePeak = true;
  if (rank == 0)
    log::warn(strf("achieved %.4g FLOP/s, above the peak of %.4g FLOP/s (%s): that peak is wrong for this device; "
                   "MFU is shown as '%s'",
                   rec.flopsPerS, s.measures.peakFlopsPerS, s.measures.peakSource.c_str(), kMfuAbovePeak));
}

// The training steps' peaks (per rank and the largest) and the evaluations' (the largest), apart.
void recordPeaks(EpochRecord& rec, const PhasePeaks& peaks, Dist& dist) {
  const PhasePeaks::Peaks train = peaks.training(), eval = peaks.evaluation();
  for (double bytes : dist.gather(static_cast<double>(train.memory)))
    rec.peakMemoryPerRank.push_back(static_cast<std::int64_t>(bytes));
  rec.peakMemoryBytes = *std::max_element(rec.peakMemoryPerRank.begin(), rec.peakMemoryPerRank.end());
  double most[] = {static_cast<double>(train.allocated), static_cast<double>(eval.memory),
                   static_cast<double>(eval.allocated)};  // -1 where not measured or not run
  dist.maxInPlace({&most[0], &most[1], &most[2]});
  rec.peakAllocatedBytes = static_cast<std::int64_t>(most[0]);
  rec.evalPeakMemoryBytes = static_cast<std::int64_t>(most[1]);
  rec.evalPeakAllocatedBytes = static_cast<std::int64_t>(most[2]);
}
// This rank's phases `mine` (and its exchange's exposed and in-flight seconds in `m`) over the ranks.
EpochBreakdown breakdownOverRanks(const PhaseSeconds& mine, const EpochMeters& m, Dist& dist, bool gpu) {
  const PhaseSeconds r = reported(mine);
  std::vector<double> v(r.begin(), r.end());
  v.push_back(summedSeconds(r));
  const std::vector<double> most = dist.max(v);
  // The share of the exchange hidden behind backward, on the host clock (on a GPU the host does
  // not see the exchange's end).
  const bool overlapKnown = !gpu && dist.active() && m.commInFlight > 0;
  v.push_back(overlapKnown ? std::clamp(1.0 - m.commWait / m.commInFlight, 0.0, 1.0) : 0.0);
  v.push_back(overlapKnown ? 1.0 : 0.0);
  const std::vector<double> sum = dist.sum(v);
  const double ranks = static_cast<double>(std::max(1, dist.worldSize()));
  EpochBreakdown b;
  for (std::size_t i = 0; i < kPhases; ++i) {
    b.max[i] = most[i];
    b.mean[i] = sum[i] / ranks;
  }
  b.epochS = most[kPhases];
  b.meanEpochS = sum[kPhases] / ranks;
  if (sum[kPhases + 2] > 0) b.commOverlap = sum[kPhases + 1] / sum[kPhases + 2];
  b.clock = gpu ? "cuda events" : "host";
  return b;
}
}  // namespace

EpochRun::EpochRun(TrainSetup& s, const Progress& at)
    : s_(s),
      skippedBefore_(s.data->skippedSamples() - at.meters.skippedImages),
      hostDecodedBefore_(s.data->hostDecodedSamples()),
      firstMicro_(at.position.micro),
      meters_(at.meters),
      sums_(StepSums::from(at.meters, s.settings.device)),
      peaks_(s.settings.device),
      clock_(s.settings.device),
      phases_(s.settings.device) {
  LoaderOptions lo = s.settings.trainLoader;
  lo.epoch = at.position.epoch;
  lo.startSample = at.position.sample;
  loader_.emplace(*s.data, Split::Train, lo);  // its threads start preparing batches now
  feed_.emplace(*loader_, s.settings.device, s.spec().train.numerics.channelsLast,
                static_cast<int>(s.spec().train.execution.copyAhead));
  phases_.resolveEveryStep(s.spec().output.stepBreakdown);
  clock_.reset();
  phases_.reset();
}

std::int64_t EpochRun::microBatches() const { return firstMicro_ + loader_->numBatches(); }

std::int64_t EpochRun::samplePosition(std::int64_t micro) const { return loader_->consumedAfter(micro - firstMicro_); }

std::function<Batch()> EpochRun::batches() {
  return [this] {
    auto batch = feed_->next();
    if (!batch) throw std::logic_error("batch loader ended early");
    return std::move(*batch);
  };
}

void EpochRun::stepped(TrainPosition& pos, std::int64_t microBatches) {
  pos.advance(microBatches, samplePosition(pos.micro + microBatches));
  ++meters_.steps;
}

StepSample EpochRun::sample(const TrainPosition& pos, double lr, double runSeconds, const torch::Tensor& loss) const {
  StepSample s;
  s.step = pos.step;
  s.epoch = pos.epoch;
  s.stepsInEpoch = meters_.steps;
  s.samples = meters_.samples;
  s.lr = lr;
  s.dataWait = dataWaitSoFar();
  s.commWait = meters_.commWait;
  s.runSeconds = runSeconds;
  s.loss = loss;
  if (s_.spec().output.stepBreakdown) s.phases = reported(phasesSoFar());
  s.normSum = sums_.normSum.clone();
  if (s_.learner.scaler->enabled()) s.lossScale = s_.learner.scaler->scaleTensor().clone();
  return s;
}

double EpochRun::dataWaitSoFar() const { return meters_.dataWait + loader_->waitSeconds(); }

PhaseSeconds EpochRun::phasesSoFar() const {
  PhaseSeconds p = meters_.phases;
  const PhaseSeconds now = phases_.seconds();
  for (std::size_t i = 0; i < kPhases; ++i) p[i] += now[i];
  return p;
}

std::int64_t EpochRun::skippedImages() const { return s_.data->skippedSamples() - skippedBefore_; }

Progress EpochRun::progress(const TrainPosition& position) const {
  Progress p{position, meters_};
  sums_.into(p.meters);
  p.meters.elapsed += clock_.seconds();
  p.meters.dataWait += loader_->waitSeconds();
  p.meters.skippedImages = skippedImages();
  p.meters.phases = phasesSoFar();
  p.position.scalerSkipped = s_.learner.scaler->skippedSteps();
  return p;
}

EpochRecord endEpoch(TrainSetup& s, EpochRun& run, const TrainPosition& position, double lr, Dist& dist,
                     const std::optional<EvalResult>& evaluated) {
  const Progress now = run.progress(position);
  const EpochMeters& m = now.meters;
  const EpochTotals t = totalsOverRanks(m, dist);
  EpochRecord rec;
  rec.epoch = position.epoch;
  rec.timeS = t.elapsed;
  rec.dataWaitS = t.dataWait;
  rec.commWaitS = t.commWait;
  rec.commBytes = static_cast<std::int64_t>(t.commBytes);
  rec.commBytesPerStep = m.steps > 0 ? t.commBytes / static_cast<double>(m.steps) : 0.0;
  {
    GradReducer& reducer = *s.learner.reducer;
    const std::vector<double> held = dist.max({static_cast<double>(reducer.parameterBytes()),
                                               static_cast<double>(reducer.gradientBytes()),
                                               static_cast<double>(s.learner.optimizer->stateBytes())});
    rec.parametersBytes = static_cast<std::int64_t>(held[0]);
    rec.gradientsBytes = static_cast<std::int64_t>(held[1]);
    rec.optimizerBytes = static_cast<std::int64_t>(held[2]);
    const double n = dist.worldSize();  // a ring's share of the payload (sharding's two collectives: (n-1)/n each)
    rec.sentBytesPerStep = rec.commBytesPerStep * (reducer.sharded() ? 1.0 : 2.0) * (n - 1.0) / n;
  }
  rec.steps = m.steps;
  rec.samples = static_cast<std::int64_t>(t.samples);
  rec.imagesPerS = t.samples / std::max(rec.timeS, 1e-9);
  rec.trainLoss = t.samples > 0 ? t.lossSum / t.samples : 0.0;
  rec.trainTop1 = t.samples > 0 ? 100.0 * t.correct / t.samples : 0.0;
  rec.lr = lr;
  rec.gradNorm = m.steps > 0 ? m.normSum / static_cast<double>(m.steps) : 0.0;
  rec.lossScale = s.learner.scaler->scaleValue();
  rec.skippedSteps = s.learner.scaler->skippedSteps() + position.nonFiniteSkipped;
  rec.flopsPerS = s.measures.flops.total * rec.imagesPerS;  // FLOPs per unit x units per second
  if (s.learner.task->unit() == "tokens") {  // the units are tokens: the record says so
    rec.tokensPerS = rec.imagesPerS;
    rec.imagesPerS = 0;
  }
  rec.mfu = s.measures.peakFlopsPerS > 0 ? rec.flopsPerS / s.measures.peakFlopsPerS : 0.0;
  warnIfAbovePeak(s, rec, dist.rank());
  if (s.spec().train.evaluation.eval) {
    PhaseScope evaluating(Phase::Eval);
    run.peaks().beginEvaluation();
    const EvalResult ev = evaluated ? *evaluated : evaluate(s, dist);
    rec.valLoss = ev.loss;
    rec.valTop1 = ev.top1;
    rec.valTop5 = ev.top5;
    if (rec.tokensPerS) rec.valPerplexity = std::exp(ev.loss);
    if (s.learner.ema) {
      s.learner.ema->swap(*s.learner.model);
      rec.valTop1Ema = evaluate(s, dist).top1;
      s.learner.ema->swap(*s.learner.model);
    }
    run.peaks().endEvaluation();
  }
  double skipped = static_cast<double>(run.skippedImages());  // training and evaluation, all ranks
  double hostDecoded = static_cast<double>(run.hostDecodedImages());
  const LoaderTimes lt = run.loaderTimes();  // training batches of this epoch run, all ranks' workers
  double batches = static_cast<double>(lt.batches), buildS = lt.buildS, buildCpuS = lt.buildCpuS, pinS = lt.pinS;
  dist.sumInPlace({&skipped, &hostDecoded, &batches, &buildS, &buildCpuS, &pinS});
  rec.skippedImages = static_cast<std::int64_t>(skipped);
  rec.hostDecodedImages = static_cast<std::int64_t>(hostDecoded);
  rec.loaderBatches = static_cast<std::int64_t>(batches);
  rec.loaderBuildS = buildS;
  rec.loaderBuildCpuS = buildCpuS;
  rec.loaderPinS = pinS;
  recordPeaks(rec, run.peaks(), dist);
  if (phaseBreakdownOn()) rec.breakdown = breakdownOverRanks(run.phasesSoFar(), m, dist, s.settings.device.is_cuda());
  return rec;
}

}  // namespace exprun
