// Purpose: resuming on another number of ranks (see WorldSize.h).
#include "runner/checkpoint/WorldSize.h"

#include "runner/api/Data.h"
#include "runner/util/Log.h"

namespace exprun {

void requireWorldSizeChangeable(const CheckpointFiles& files) {
  if (!files.meta.hasProgress || !files.meta.totals)
    throw CheckpointError(files.path + ": written by an exprun without resumption on another number of ranks; "
                          "resume it on " + std::to_string(files.worldSize()) + " ranks");
}

void deriveSample(TrainPosition& pos, const CheckpointFiles& files) {
  if (pos.sample < 0) pos.sample = std::int64_t{files.worldSize()} * files.shape().microBatch * pos.micro;
}

// Every rank starts from rank 0's position; the epoch's meters so far are the old ranks' totals (the
// sums on rank 0, the maxima everywhere); the micro-batch counter is re-expressed on this run's
// shards. (A changed global batch re-expresses the step count: train/Setup.h's continueInNewSteps.)
Progress progressForNewWorld(const CheckpointFiles& files, int rank, const Spec& spec, const BatchShape& now,
                             int worldSize, const torch::Device& device) {
  Progress p = files.meta.progress;
  TrainPosition& pos = p.position;
  deriveSample(pos, files);
  const EpochTotals& t = *files.meta.totals;
  EpochMeters& m = p.meters;
  const bool first = rank == 0;
  m.lossSum = first ? t.lossSum : 0.0;
  m.correct = first ? static_cast<std::int64_t>(t.correct) : 0;
  m.samples = first ? static_cast<std::int64_t>(t.samples) : 0;
  m.skippedImages = first ? static_cast<std::int64_t>(t.skippedImages) : 0;
  m.elapsed = t.elapsed;
  m.dataWait = t.dataWait;
  m.commWait = t.commWait;
  m.commBytes = static_cast<std::int64_t>(t.commBytes);
  const std::int64_t perBatch = std::int64_t{worldSize} * now.microBatch;
  pos.micro = (pos.sample + perBatch - 1) / perBatch;  // exact when the global batch is kept
  const std::uint64_t seed = splitmix64(
      splitmix64(static_cast<std::uint64_t>(spec.seed) ^ splitmix64(static_cast<std::uint64_t>(pos.step))) +
      static_cast<std::uint64_t>(rank));
  auto reseed = [&](at::Generator gen) {
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_current_seed(seed);
  };
  reseed(generatorFor(device));
  if (device.is_cuda()) reseed(at::detail::getDefaultCPUGenerator());
  return p;
}

Spec specForWorldSize(const CheckpointFiles& files, const Spec& spec, int worldSize, bool force) {
  const int then = files.worldSize();
  // The same world size as a run that never changed it: the spec as it is. batch_size: auto plans
  // for train.global_batch.
  if (!files.accumulationChosen(worldSize) || !spec.train.batching.batchSize) return spec;
  if (then != worldSize) requireWorldSizeChangeable(files);
  const BatchShape was = files.shape();
  const std::int64_t micro = *spec.train.batching.batchSize;
  const std::int64_t perStep = std::int64_t{worldSize} * micro;
  Spec out = spec;
  if (was.globalBatch % perStep == 0) {
    out.train.batching.accumulate = was.globalBatch / perStep;
    if (then == worldSize) return out;  // a resumed run resumed again on its own number of ranks
    log::info(strf("resuming a %d-rank checkpoint on %d ranks: global batch %lld kept as %d x %lld x accumulate %lld "
                   "(was %d x %lld x %lld)",
                   then, worldSize, static_cast<long long>(was.globalBatch), worldSize, static_cast<long long>(micro),
                   static_cast<long long>(out.train.batching.accumulate), then, static_cast<long long>(was.microBatch),
                   static_cast<long long>(was.accumulate)));
    return out;
  }
  std::string working;  // the world sizes that keep the global batch with this micro-batch
  if (was.globalBatch % micro == 0) {
    const std::int64_t slots = was.globalBatch / micro;
    for (std::int64_t w = 1; w <= slots; ++w)
      if (slots % w == 0)
        working += strf("%s%lld (accumulate %lld)", working.empty() ? "" : ", ", static_cast<long long>(w),
                        static_cast<long long>(slots / w));
  }
  const std::int64_t changed = perStep * spec.train.batching.accumulate;
  const std::string what =
      strf("%s: saved by %d ranks with global batch %lld (%d x %lld x accumulate %lld); %d ranks x micro-batch %lld "
           "cannot keep it",
           files.path.c_str(), then, static_cast<long long>(was.globalBatch), then, static_cast<long long>(was.microBatch),
           static_cast<long long>(was.accumulate), worldSize, static_cast<long long>(micro));
  if (!force)
    throw CheckpointError(what + (working.empty() ? std::string(" (no number of ranks can with this micro-batch)")
                                                  : "; world sizes that keep it: " + working) +
                          ". Pass --force to go on with global batch " + std::to_string(changed) + " (" +
                          std::to_string(worldSize) + " x " + std::to_string(micro) + " x accumulate " +
                          std::to_string(spec.train.batching.accumulate) + "), the learning rate rescaled by the spec's rule");
  log::warn(what + "; going on with global batch " + std::to_string(changed) +
            " (--force): the learning rate follows the spec's scaling rule, the change is recorded in the result file");
  return out;
}

}  // namespace exprun
