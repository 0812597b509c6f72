// Purpose: the checkpoint policy of a run (see Checkpointer.h).
#include "runner/checkpoint/Checkpointer.h"

#include <filesystem>

#include "runner/util/Log.h"
#include "runner/metrics/Meters.h"

namespace exprun {

namespace {

BatchShape batchShapeOf(const TrainSetup& s) {
  return BatchShape{s.microBatch, s.accumulate, s.globalBatch, s.stepsPerEpoch, s.lr};
}

// A resumption with another global batch (--force) counts steps of the new size: the epoch's steps
// done are its steps per epoch less those the rest of the epoch takes on this run's ranks, so the
// epoch ends at a whole number of its steps and the later ones line up with the schedule.
void continueInNewSteps(Restored& r, const TrainSetup& s) {
  TrainPosition& pos = r.progress.position;
  LoaderOptions count = s.trainLoader;  // the rest of the epoch, counted as setUpSchedule counts an epoch
  count.workers = 0;
  count.epoch = pos.epoch;
  count.startSample = pos.sample;
  const std::int64_t micro = BatchLoader(*s.data, Split::Train, count).numBatches();
  const std::int64_t steps = (micro + s.accumulate - 1) / s.accumulate;
  const std::int64_t done = std::max<std::int64_t>(0, s.stepsPerEpoch - steps);
  pos.step = (pos.epoch - 1) * s.stepsPerEpoch + done;
  r.progress.meters.steps = done;
  r.change->step = pos.step;
}

}  // namespace

Checkpointer::Checkpointer(const Spec& spec, Dist& dist, const std::string& outDir, const ResumeRequest& request)
    : dist_(dist),
      config_(spec.output.checkpoint),
      request_(request),
      store_(checkpointRoot(spec, outDir.empty() ? "." : outDir)) {
  if (config_.everySteps > 0 || config_.everyEpochs > 0 || !request.what.empty()) lockFolder(request.force);
  if (request.what.empty()) return;
  found_ = findCheckpoint(request.what, store_, dist_);
  if (!found_) log::info("no checkpoint in " + store_.dir() + " yet: starting from the beginning");
}

void Checkpointer::lockFolder(bool force) {
  double failed = 0;
  std::string why;
  if (dist_.rank() == 0) {
    try {
      lock_ = std::make_unique<FolderLock>(store_.dir(), force);
    } catch (const CheckpointError& e) {
      failed = 1;
      why = e.what();
    }
  }
  if (dist_.active()) failed = dist_.max({failed})[0];
  if (failed > 0)
    throw CheckpointError(dist_.rank() == 0 ? why
                                            : "rank 0 could not lock the checkpoint folder '" + store_.dir() + "'");
}

Spec Checkpointer::specToTrain(const Spec& spec) const {
  return found_ ? specForWorldSize(*found_, spec, dist_.worldSize(), request_.force) : spec;
}

std::optional<Restored> Checkpointer::begin(TrainSetup& s, const ResultFile& result) {
  s_ = &s;
  result_ = &result;
  if (!found_) return std::nullopt;
  Restored restored = restoreCheckpoint(*found_, dist_, s.spec, s.parts, request_.force, s.device, batchShapeOf(s),
                                        s.plan.has_value());
  if (restored.change && restored.change->forced) continueInNewSteps(restored, s);
  found_.reset();  // its bytes are no longer needed
  disarmFaults();  // a retry must get through
  const TrainPosition& p = restored.progress.position;
  log::info(strf("resumed from %s: epoch %lld, step %lld (%lld micro-batches into the epoch)", restored.path.c_str(),
                 static_cast<long long>(p.epoch), static_cast<long long>(p.step), static_cast<long long>(p.micro)));
  if (const auto& c = restored.change) {
    log::info(strf("the checkpoint was saved by %d ranks, this run has %d: sample %lld of epoch %lld onwards re-sharded "
                   "over %d ranks; global batch %lld -> %lld, accumulate %lld -> %lld, lr %.6g -> %.6g",
                   c->fromWorld, c->toWorld, static_cast<long long>(c->sample), static_cast<long long>(c->epoch),
                   c->toWorld, static_cast<long long>(c->from.globalBatch), static_cast<long long>(c->to.globalBatch),
                   static_cast<long long>(c->from.accumulate), static_cast<long long>(c->to.accumulate), c->from.lr,
                   c->to.lr));
    if (c->commStateReset)
      log::warn("the comm hook's per-rank state (" + s.commName +
                ") cannot follow the ranks to another world size: it starts afresh");
  }
  return restored;
}

void Checkpointer::afterStep(std::int64_t step, const std::function<Progress()>& now) {
  const std::int64_t every = config_.everySteps;
  if (every > 0 && step % every == 0) save(now());
}

void Checkpointer::afterEpoch(std::int64_t epoch, const Progress& next) {
  const std::int64_t every = config_.everyEpochs;
  if (every > 0 && epoch % every == 0) save(next);
}

void Checkpointer::onStop(const Progress& now) {
  if (config_.everySteps > 0 || config_.everyEpochs > 0) save(now);
}

void Checkpointer::save(const Progress& at) {
  Stopwatch saving;
  if (!s_) throw std::logic_error("Checkpointer: save before begin()");
  const std::string where = saveCheckpoint(store_, static_cast<int>(config_.keep), dist_, s_->spec, s_->data->info(),
                                           s_->parts, at, result_->toJson(), s_->device, batchShapeOf(*s_));
  std::uintmax_t bytes = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(where, ec)) bytes += f.file_size(ec);
  log::info(strf("checkpoint saved: %s (step %lld, %.1f MiB, %.2f s)", where.c_str(),
                 static_cast<long long>(at.position.step), bytes / 1048576.0, saving.seconds()));
}

}  // namespace exprun
