// Purpose: the checkpoint policy of a run (see Checkpointer.h).
#include "runner/train/Checkpointer.h"

#include <filesystem>

#include "runner/Log.h"
#include "runner/metrics/Meters.h"

namespace exprun {

Checkpointer::Checkpointer(TrainSetup& s, const ResultFile& result, Dist& dist, const std::string& outDir)
    : s_(s), result_(result), dist_(dist), store_(checkpointRoot(s.spec, outDir.empty() ? "." : outDir)) {}

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

std::optional<Restored> Checkpointer::restore(const ResumeRequest& request) {
  const auto& c = s_.spec.output.checkpoint;
  if (c.everySteps > 0 || c.everyEpochs > 0 || !request.what.empty()) lockFolder(request.force);
  if (request.what.empty()) return std::nullopt;
  auto restored = restoreCheckpoint(request.what, store_, dist_, s_.spec, s_.parts, request.force, s_.device);
  disarmFaults();  // a retry must get through
  if (!restored) {
    log::info("no checkpoint in " + store_.dir() + " yet: starting from the beginning");
    return std::nullopt;
  }
  const TrainPosition& p = restored->progress.position;
  log::info(strf("resumed from %s: epoch %lld, step %lld (%lld micro-batches into the epoch)", restored->path.c_str(),
                 static_cast<long long>(p.epoch), static_cast<long long>(p.step), static_cast<long long>(p.micro)));
  return restored;
}

void Checkpointer::afterStep(std::int64_t step, const std::function<Progress()>& now) {
  const std::int64_t every = s_.spec.output.checkpoint.everySteps;
  if (every > 0 && step % every == 0) save(now());
}

void Checkpointer::afterEpoch(std::int64_t epoch, const Progress& next) {
  const std::int64_t every = s_.spec.output.checkpoint.everyEpochs;
  if (every > 0 && epoch % every == 0) save(next);
}

void Checkpointer::onStop(const Progress& now) {
  const CheckpointConfig& c = s_.spec.output.checkpoint;
  if (c.everySteps > 0 || c.everyEpochs > 0) save(now);
}

void Checkpointer::save(const Progress& at) {
  Stopwatch saving;
  const std::string where = saveCheckpoint(store_, static_cast<int>(s_.spec.output.checkpoint.keep), dist_, s_.spec,
                                           s_.data->info(), s_.parts, at, result_.toJson(), s_.device);
  std::uintmax_t bytes = 0;
  std::error_code ec;
  for (const auto& f : std::filesystem::directory_iterator(where, ec)) bytes += f.file_size(ec);
  log::info(strf("checkpoint saved: %s (step %lld, %.1f MiB, %.2f s)", where.c_str(),
                 static_cast<long long>(at.position.step), bytes / 1048576.0, saving.seconds()));
}

}  // namespace exprun
