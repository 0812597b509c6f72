// Purpose: turns a Dataset split into a stream of batches for one epoch of one rank (the
// distributed sampler); `workers` background threads prepare up to `prefetch` batches ahead.
// Rule: a batch's samples and their augmentation depend only on (seed, epoch, sample): with W ranks
// of batch b, batch k of the ranks together holds batch k of one process with batch W*b, whatever
// the number of worker threads, and a resumed epoch sees every sample once across old and new ranks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "runner/api/Data.h"

namespace exprun {

struct LoaderOptions {
  std::int64_t batchSize = 128;
  bool shuffle = true;
  bool dropLast = false;
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  int workers = 2;
  int prefetch = 4;
  int rank = 0;
  int worldSize = 1;
  bool padToEqual = true;  // pad the shards to equal length (training); false for evaluation
  std::int64_t startSample = 0;  // positions of the order already consumed, by all ranks together (resuming mid-epoch)
  bool pinMemory = false;  // batches in page-locked memory, for asynchronous copies to a GPU
  // Repeated augmentation (DeiT's and torchvision's RASampler): every sample of the order `repeats`
  // times in a row (consecutive positions go to different ranks), each copy augmented with a seed
  // of its own; the epoch keeps floor(n / 256) * 256 positions (rounded down to the ranks), as
  // RASampler does. 1: off.
  int repeats = 1;
};

// Where the loader's workers spent their time (to compare the pipeline under training with the
// pipeline alone): batches built, the wall-clock and thread CPU seconds the data plugin took to make them
// (all workers together: CPU below wall means the workers waited for a core or a lock), and the
// wall-clock seconds of copying them into page-locked memory.
struct LoaderTimes {
  std::int64_t batches = 0;
  double buildS = 0, buildCpuS = 0, pinS = 0;
};

// The permutation of [0, n) used for (seed, epoch): the same on every process.
std::vector<std::int64_t> epochPermutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

// The order is a permutation drawn from (seed, epoch), the same on every rank whatever the number
// of ranks — or the natural order for evaluation. Rank r of W takes positions r, r+W, r+2W, ... For
// training the permutation is first padded by repeating its beginning to a multiple of W (as
// torch.utils.data.DistributedSampler does), so every rank runs the same number of steps;
// evaluation shards are not padded, so the ranks' counts add up to the split exactly. A resumed
// epoch starts at `startSample` (how many the ranks consumed together, on however many ranks they
// were) and shards the rest of the order over this run's ranks the same way.
class BatchLoader {
 public:
  BatchLoader(const Dataset& data, Split split, LoaderOptions opts);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Batches this rank gets (from startSample on).
  std::int64_t numBatches() const { return numBatches_; }
  // Positions of the epoch's order the ranks together have consumed after each took `batches`
  // batches (startSample included; padding counted; at most the padded order's length).
  std::int64_t consumedAfter(std::int64_t batches) const;
  // Next batch in order, or nullopt after the last. Rethrows the exception of a batch that failed.
  std::optional<Batch> next();
  // Whether next() would return a batch at once, or none is left: the next batch is made. False
  // for a batch that failed (next() raises its error) and, without worker threads, while batches
  // are left (next() makes them then).
  bool ready();
  // Seconds next() spent waiting for batches that were not ready.
  double waitSeconds() const { return waitS_; }
  // The workers' (or, without them, next()'s) time on the batches built so far.
  LoaderTimes times() const;

 private:
  Batch build(std::int64_t b);
  void workerLoop();

  const Dataset& data_;
  Split split_;
  LoaderOptions opts_;
  std::vector<std::int64_t> order_;  // this rank's samples, from startSample on
  std::vector<int> copy_;            // repeated augmentation: which copy of its sample each is (else empty)
  std::int64_t shardLength_ = 0;     // positions left per rank (padded), from startSample on
  std::int64_t numBatches_ = 0;
  std::int64_t nextOut_ = 0;
  double waitS_ = 0;

  std::mutex mu_;
  std::condition_variable readyCv_, spaceCv_;
  std::int64_t nextTask_ = 0;
  std::map<std::int64_t, Batch> ready_;
  std::map<std::int64_t, std::exception_ptr> errors_;  // by batch: raised when that batch is due
  mutable std::mutex timesMu_;
  LoaderTimes times_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace exprun
