// Purpose: the checkpoint policy of a run (see Checkpointer.h).
#include "runner/checkpoint/Checkpointer.h"
#include "runner/checkpoint/WorldSize.h"

#include <filesystem>

#include "runner/metrics/Meters.h"
#include "runner/util/Log.h"

namespace exprun {

Checkpointer::Checkpointer(const Spec& spec, Dist& dist, const RunPaths& paths, const ResumeRequest& request)
    : dist_(dist), config_(spec.output.checkpoint), request_(request), store_(paths.checkpointRoot()) {
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

std::optional<Restored> Checkpointer::begin(const CheckpointContent& run, const ResultFile& result) {
  run_ = run;
  result_ = &result;
  if (!found_) return std::nullopt;
  Restored restored = restoreCheckpoint(*found_, dist_, run, request_.force);
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
      log::warn("the comm hook's per-rank state (" + run.spec->distributed.comm.type() +
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

void Checkpointer::onStop(const Progress& now, bool always) {
  if (always || config_.everySteps > 0 || config_.everyEpochs > 0) save(now);
}

void Checkpointer::save(const Progress& at) {
  Stopwatch saving;
  if (!run_) throw std::logic_error("Checkpointer: save before begin()");
  const std::string where = saveCheckpoint(store_, static_cast<int>(config_.keep), dist_, *run_, at, *result_);
  std::uintmax_t bytes = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(where, ec)) bytes += f.file_size(ec);
  log::info(strf("checkpoint saved: %s (step %lld, %.1f MiB, %.2f s)", where.c_str(),
                 static_cast<long long>(at.position.step), bytes / 1048576.0, saving.seconds()));
}

std::string Checkpointer::newest() const {
  const auto found = store_.candidates();
  return found.empty() ? "" : found.front();
}

}  // namespace exprun
