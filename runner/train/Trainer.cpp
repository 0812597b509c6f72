// Purpose: the training loop (see Trainer.h).
#include "runner/train/Trainer.h"

#include <unistd.h>

#include <filesystem>

#include "runner/Log.h"
#include "runner/train/Epoch.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

std::string formatDuration(double s) {
  if (s < 60) return strf("%.0f s", s);
  if (s < 3600) return strf("%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return strf("%d h %02d min", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
}

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

// The progress line, with the ETA.
void logStep(const TrainSetup& s, const Progress& now, double lr, double runSeconds, std::int64_t firstStep) {
  const EpochMeters& m = now.meters;
  const std::int64_t step = now.position.step;
  const double eta = runSeconds / std::max<std::int64_t>(1, step - firstStep) * (s.totalSteps - step);
  log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f img/s  ETA %s",
                 static_cast<long long>(now.position.epoch), static_cast<long long>(s.spec.train.epochs),
                 static_cast<long long>(m.steps), static_cast<long long>(s.stepsPerEpoch),
                 m.lossSum / std::max<std::int64_t>(1, m.samples), lr, m.samples / std::max(m.elapsed, 1e-9),
                 formatDuration(eta).c_str()));
}

void logEpoch(const EpochRecord& r) {
  log::info(
      strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | val loss %.4f top1 %.2f%% top5 %.2f%% | "
           "%.0f img/s, data wait %.2f s, comm wait %.2f s, peak memory %.1f MiB",
           static_cast<long long>(r.epoch), formatDuration(r.timeS).c_str(), r.trainLoss, r.trainTop1, r.valLoss,
           r.valTop1, r.valTop5, r.imagesPerS, r.dataWaitS, r.commWaitS, r.peakMemoryBytes / 1048576.0));
}

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
  Dist single;
  Dist& dist = dist_ ? *dist_ : single;
  TrainSetup s = setUp(spec_, dist);
  ResultFile result(s.spec.name, s.spec.toJson(), s.provenance.toJson());
  auto writeResult = [&] {
    if (dist.rank() == 0 && !resultPath.empty()) result.write(resultPath);
  };
  const std::string outDir =
      resultPath.empty() ? s.spec.output.dir : std::filesystem::path(resultPath).parent_path().string();
  Checkpointer checkpointer(s, result, dist, outDir);
  log::info(s.table());
  Progress at;  // the position, and this rank's meters of the epoch in progress
  if (auto restored = checkpointer.restore(resume_)) {
    at = restored->progress;
    for (const auto& e : restored->resultEpochs) result.addEpoch(epochFromJson(e));
  }
  TrainStep step(s.parts, s.spec.train, dist, s.device);
  const std::int64_t firstStep = at.position.step;
  Stopwatch runClock;
  bool interrupted = false;
  s.parts.model->train();
  while (!finished(s, at.position)) {
    EpochRun epoch(s, at);
    TrainPosition& pos = at.position;
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
      ++pos.step;
      ++epoch.meters().steps;
      if (logDue(s, epoch.meters().steps, pos.micro == epoch.microBatches())) {
        step.verify(pos.step);
        const Progress now = epoch.progress(pos);  // waits for the device before the clock is read
        logStep(s, now, lr, runClock.seconds(), firstStep);
      }
      checkpointer.afterStep(pos.step, [&] {
        step.verify(pos.step);
        return epoch.progress(pos);
      });
      faultPoint("step", pos.step, dist.rank());
    }
    step.verify(pos.step);
    if (interrupted) {
      checkpointer.onStop(epoch.progress(pos));
      break;
    }
    const EpochRecord record = endEpoch(s, epoch, pos, lr, dist);
    result.addEpoch(record);
    writeResult();
    logEpoch(record);
    // On to the next epoch, with fresh meters (the skipped-step counts run on).
    ++pos.epoch;
    pos.micro = 0;
    pos.scalerSkipped = s.parts.scaler->skippedSteps();
    at.meters = EpochMeters{};
    checkpointer.afterEpoch(record.epoch, at);
  }
  result.setStatus(interrupted ? "interrupted" : "completed");
  writeResult();
  if (dist.rank() == 0 && !resultPath.empty() && s.spec.output.saveWeights) saveWeights(*s.parts.model, resultPath);
  dist.barrier();
  return TrainOutcome{result.toJson(), interrupted, s.parts.model};
}

}  // namespace exprun
