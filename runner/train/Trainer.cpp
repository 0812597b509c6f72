// Purpose: the training loop (see Trainer.h).
#include "runner/train/Trainer.h"

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <optional>

#include "runner/util/Log.h"
#include "runner/step/Device.h"
#include "runner/train/Epoch.h"
#include "runner/live/Live.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

// A stop request on any rank stops every rank at the same step. Agreeing is a collective the host
// waits for: on a GPU the ranks agree every 10 steps, so that steps do not wait for the device.
bool stopRequestedOnAnyRank(Dist& dist, std::int64_t step, bool gpu) {
  if (!dist.active()) return stopRequested().load();
  if (gpu && step % 10 != 0) return false;
  return dist.max({stopRequested().load() ? 1.0 : 0.0})[0] > 0;
}

// A progress line is due every train.log_every steps, and at the epoch's last step.
bool logDue(const TrainSetup& s, std::int64_t epochSteps, bool last) {
  const std::int64_t every = s.spec.train.logEvery;
  return every > 0 && (epochSteps % every == 0 || last);
}

// An evaluation inside the epoch is due every train.eval_every_steps steps (the epoch's end has its own).
bool evalDue(const TrainSetup& s, std::int64_t step, bool last) {
  const std::int64_t every = s.spec.train.evalEverySteps;
  return s.spec.train.eval && every > 0 && step % every == 0 && !last;
}

// The run's evaluations: each one recorded on the run clock (result file, log line, TensorBoard)
// and checked against train.target_*; the run stops at the first one meeting it (unless
// train.stop_at_target is false).
class Evaluations {
 public:
  Evaluations(TrainSetup& s, Dist& dist, ResultFile& result, LiveMetrics& live, std::function<double()> clock)
      : s_(s), dist_(dist), result_(result), live_(live), clock_(std::move(clock)) {
    result.setTarget(Target{s.spec.train.targetTop1, s.spec.train.targetTop5, s.spec.train.targetValLoss});
  }
  // An evaluation inside the epoch (train.eval_every_steps), its time left out of the epoch's
  // training time. True when the run stops here.
  bool inEpoch(EpochRun& epoch, const TrainPosition& pos) {
    Stopwatch evaluating;
    const EvalResult ev = evaluate(s_, dist_);
    epoch.exclude(evaluating.seconds());
    if (record(pos, ev)) stoppedInEpoch_ = ev;
    return stop_;
  }
  // The evaluation that stopped the run inside the epoch (the epoch's end repeats none).
  const std::optional<EvalResult>& stoppedInEpoch() const { return stoppedInEpoch_; }
  // The epoch's end, with the evaluation endEpoch made.
  void atEpochEnd(const EpochRecord& r, const TrainPosition& pos) {
    if (s_.spec.train.eval && !stoppedInEpoch_) record(pos, EvalResult{r.valLoss, r.valTop1, r.valTop5});
  }
  bool stop() const { return stop_; }
  void logTarget() const {
    if (const EvalRecord* hit = result_.targetReached())
      log::info(strf("target reached at step %lld (epoch %lld): val loss %.4f top1 %.2f%% top5 %.2f%%, %.1f s into "
                     "the run",
                     static_cast<long long>(hit->step), static_cast<long long>(hit->epoch), hit->valLoss, hit->valTop1,
                     hit->valTop5, hit->timeS));
  }

 private:
  bool record(const TrainPosition& pos, const EvalResult& ev) {
    const EvalRecord rec{pos.step, pos.epoch, clock_(), ev.loss, ev.top1, ev.top5};
    result_.addEval(rec);
    live_.evaluation(rec);
    stop_ = s_.spec.train.stopAtTarget && result_.targetReached() != nullptr;
    return stop_;
  }

  TrainSetup& s_;
  Dist& dist_;
  ResultFile& result_;
  LiveMetrics& live_;
  std::function<double()> clock_;
  bool stop_ = false;
  std::optional<EvalResult> stoppedInEpoch_;
};

// The final weights beside the result file (output.save_weights; rank 0).
void saveWeights(Model& model, const std::string& resultPath) {
  const std::string path = resultPath.substr(0, resultPath.size() - 5) + ".weights.pt";
  torch::serialize::OutputArchive archive;
  for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
  for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), /*is_buffer=*/true);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "'");
}

// Done when the steps are; but an epoch resumed after its last step (micro > 0) still needs its
// end (evaluation, record) when the checkpoint was taken before that.
bool finished(const TrainSetup& s, const TrainPosition& p) {
  return p.epoch > s.spec.train.epochs || (p.step >= s.totalSteps && p.micro == 0);
}

}  // namespace

TrainOutcome Trainer::run(const std::string& resultPath) {
  Stopwatch runClock;  // the run starts (MLPerf's run_start) before set-up: loading data counts
  Dist single;
  Dist& dist = dist_ ? *dist_ : single;
  dist.setDevice(chooseDevice(spec_, dist.env()));  // the checkpoint's collectives run before the set-up
  const std::string outDir =
      resultPath.empty() ? spec_.output.dir : std::filesystem::path(resultPath).parent_path().string();
  // The checkpoint to resume from is read first: saved by another number of ranks, it decides the
  // accumulation the run is set up with.
  Checkpointer checkpointer(spec_, dist, outDir, resume_);
  TrainSetup s = setUp(checkpointer.specToTrain(spec_), dist);
  ResultFile result(s.spec.name, s.spec.toJson(), s.provenance.toJson());
  auto writeResult = [&] {
    if (dist.rank() == 0 && !resultPath.empty()) result.write(resultPath);
  };
  log::info(s.table());
  Progress at;  // the position, and this rank's meters of the epoch in progress
  if (auto restored = checkpointer.begin(s, result)) {
    at = restored->progress;
    for (const auto& e : restored->resultEpochs) result.addEpoch(epochFromJson(e));
    for (const auto& e : restored->resultEvals) result.addEval(evalFromJson(e));
    for (const auto& c : restored->worldSizeChanges) result.addWorldSizeChange(c);
    if (restored->change) result.addWorldSizeChange(restored->change->toJson());
  }
  const double earlier = at.position.runSeconds;  // the run clock of earlier attempts
  auto clock = [&] { return earlier + runClock.seconds(); };
  LiveMetrics live(s, resultPath.empty() ? "" : outDir.empty() ? "." : outDir, dist, at.position);
  Evaluations evals(s, dist, result, live, clock);
  TrainStep step(s.parts, s.spec.train, dist, s.device);
  bool interrupted = false;
  s.parts.model->train();
  while (!finished(s, at.position) && !evals.stop()) {
    EpochRun epoch(s, at);
    live.epochBegins(at, clock());
    TrainPosition& pos = at.position;
    auto now = [&] {  // for a checkpoint: the files' sizes and the run clock too
      step.verify(pos.step);
      Progress p = epoch.progress(pos);
      p.position.runSeconds = clock();
      live.flush(&p.position);
      return p;
    };
    double lr = pos.step > 0 ? s.schedule->lr(pos.step - 1) : s.lr;  // the last step's (resuming at an epoch's end)
    while (pos.step < s.totalSteps && pos.micro < epoch.microBatches()) {
      if (stopRequestedOnAnyRank(dist, pos.step, s.device.is_cuda())) {
        interrupted = true;
        break;
      }
      const std::int64_t group = std::min(s.accumulate, epoch.microBatches() - pos.micro);
      lr = s.applySchedule(pos.step);
      step.run(epoch.batches(), group, pos.step, pos.epoch, epoch.sums(), epoch.meters(), pos);
      pos.micro += group;
      pos.sample = epoch.samplePosition(pos.micro);
      ++pos.step;
      ++epoch.meters().steps;
      const bool last = pos.micro == epoch.microBatches();
      live.afterStep(epoch, pos, step.lastLoss(), lr, clock());
      if (logDue(s, epoch.meters().steps, last)) {
        step.verify(pos.step);
        live.progressLine(epoch.progress(pos), lr, clock());  // waits for the device before the clock is read
      }
      if (evalDue(s, pos.step, last)) {
        step.verify(pos.step);
        if (evals.inEpoch(epoch, pos)) break;  // the target met
      }
      checkpointer.afterStep(pos.step, now);
      faultPoint("step", pos.step, dist.rank());
    }
    step.verify(pos.step);
    if (interrupted) {
      checkpointer.onStop(now());
      break;
    }
    EpochRecord record = endEpoch(s, epoch, pos, lr, dist, evals.stoppedInEpoch());
    record.partial = evals.stoppedInEpoch().has_value();
    evals.atEpochEnd(record, pos);
    result.addEpoch(record);
    writeResult();
    live.epochEnds(record, pos.step);
    // On to the next epoch, with fresh meters (the skipped-step counts run on).
    ++pos.epoch;
    pos.micro = 0;
    pos.sample = 0;
    pos.scalerSkipped = s.parts.scaler->skippedSteps();
    pos.runSeconds = clock();
    at.meters = EpochMeters{};
    live.flush(&pos);
    if (!evals.stop()) checkpointer.afterEpoch(record.epoch, at);
  }
  live.finish();
  evals.logTarget();
  result.setStatus(interrupted ? "interrupted" : "completed");
  writeResult();
  if (dist.rank() == 0 && !resultPath.empty() && s.spec.output.saveWeights) saveWeights(*s.parts.model, resultPath);
  dist.barrier();
  return TrainOutcome{result.toJson(), interrupted, s.parts.model};
}

}  // namespace exprun
