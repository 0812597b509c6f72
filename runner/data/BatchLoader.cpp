// Purpose: ordered, bounded, multi-threaded batch preparation.
#include "runner/data/BatchLoader.h"

#include <chrono>
#include <ctime>
#include <random>

namespace exprun {


std::vector<std::int64_t> epochPermutation(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> p(static_cast<size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[i] = i;
  std::mt19937_64 rng(splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(epoch) + 0x1234)));
  for (std::int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates with an explicit, portable draw
    std::int64_t j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

BatchLoader::BatchLoader(const Dataset& data, Split split, LoaderOptions opts)
    : data_(data), split_(split), opts_(opts) {
  std::int64_t n = data.size(split);
  std::vector<std::int64_t> all;
  if (opts_.shuffle) {
    all = epochPermutation(n, opts_.seed, opts_.epoch);
  } else {
    all.resize(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) all[i] = i;
  }
  const std::int64_t w = std::max(1, opts_.worldSize);
  const int r = std::max(1, opts_.repeats);
  std::vector<int> copies;  // repeated augmentation: the copy each position of `all` is
  if (r > 1) {  // RASampler: each sample r times, padded to the ranks, floor(n / 256) * 256 kept
    std::vector<std::int64_t> repeated;
    for (std::int64_t i : all)
      for (int k = 0; k < r; ++k) repeated.push_back(i), copies.push_back(k);
    const std::int64_t total = (n * r + w - 1) / w * w;
    for (std::int64_t i = 0; static_cast<std::int64_t>(repeated.size()) < total; ++i)
      repeated.push_back(repeated[static_cast<std::size_t>(i)]), copies.push_back(copies[static_cast<std::size_t>(i)]);
    const std::int64_t kept = w * (n / 256 * 256 / w);
    repeated.resize(static_cast<std::size_t>(kept));
    copies.resize(static_cast<std::size_t>(kept));
    all = std::move(repeated);
    n = kept;
  }
  // What is left of the order; padded, by repeating the order's beginning, to a multiple of W.
  const std::int64_t start = std::max<std::int64_t>(0, opts_.startSample);
  std::vector<std::int64_t> rest(all.begin() + std::min(start, n), all.end());
  std::vector<int> restCopies;
  if (r > 1) restCopies.assign(copies.begin() + std::min(start, n), copies.end());
  if (opts_.padToEqual && !rest.empty())
    for (std::int64_t i = 0; static_cast<std::int64_t>(rest.size()) % w != 0; ++i) {
      rest.push_back(all[i % n]);
      if (r > 1) restCopies.push_back(copies[static_cast<std::size_t>(i % n)]);
    }
  for (std::int64_t i = opts_.rank; i < static_cast<std::int64_t>(rest.size()); i += w) {
    order_.push_back(rest[i]);
    if (r > 1) copy_.push_back(restCopies[static_cast<std::size_t>(i)]);
  }
  shardLength_ = (static_cast<std::int64_t>(rest.size()) + w - 1) / w;
  const std::int64_t mine = static_cast<std::int64_t>(order_.size());
  numBatches_ = opts_.dropLast ? mine / opts_.batchSize : (mine + opts_.batchSize - 1) / opts_.batchSize;
  for (int i = 0; i < opts_.workers; ++i) threads_.emplace_back([this] { workerLoop(); });
}

std::int64_t BatchLoader::consumedAfter(std::int64_t batches) const {
  const std::int64_t w = std::max(1, opts_.worldSize);
  const std::int64_t perRank = std::min(std::max<std::int64_t>(0, batches) * opts_.batchSize, shardLength_);
  return std::max<std::int64_t>(0, opts_.startSample) + w * perRank;
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  spaceCv_.notify_all();
  readyCv_.notify_all();
  for (auto& t : threads_) t.join();
}

namespace {
double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}
double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

LoaderTimes BatchLoader::times() const {
  std::lock_guard<std::mutex> lock(timesMu_);
  return times_;
}

Batch BatchLoader::build(std::int64_t b) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = threadCpuSeconds();
  const std::int64_t begin = b * opts_.batchSize;
  const std::int64_t end = std::min<std::int64_t>(begin + opts_.batchSize, static_cast<std::int64_t>(order_.size()));
  std::vector<std::int64_t> idx(order_.begin() + begin, order_.begin() + end);
  const std::uint64_t seed = splitmix64(opts_.seed ^ splitmix64(static_cast<std::uint64_t>(opts_.epoch) + 0x5EED));
  Batch batch;
  const bool pin = opts_.pinMemory;
  const PinnedBatches pinnedScope(pin);  // the plugin makes the batch in page-locked memory
  if (copy_.empty()) {
    batch = data_.makeBatch(split_, idx, seed);
  } else {  // repeated augmentation: each copy's samples with that copy's seed, put back in order
    for (int k = 0; k < opts_.repeats; ++k) {
      std::vector<std::int64_t> mine, at;
      for (std::int64_t i = begin; i < end; ++i)
        if (copy_[static_cast<std::size_t>(i)] == k) mine.push_back(order_[static_cast<std::size_t>(i)]), at.push_back(i - begin);
      if (mine.empty()) continue;
      Batch part = data_.makeBatch(split_, mine, k == 0 ? seed : splitmix64(seed + static_cast<std::uint64_t>(k)));
      if (!batch.x.defined()) {
        std::vector<std::int64_t> shape = part.x.sizes().vec();
        shape[0] = end - begin;
        auto like = [](const torch::Tensor& t) { return t.is_cuda() ? t.options() : batchMemory(t.scalar_type()); };
        batch.x = torch::empty(shape, like(part.x));
        batch.y = torch::empty({end - begin}, like(part.y));
        batch.scale = part.scale;  // a uint8 batch's normalisation (the same for every part)
        batch.shift = part.shift;
      }
      const torch::Tensor where = torch::tensor(at, torch::kInt64).to(batch.x.device());  // a plugin's batch may be on the device
      batch.x.index_copy_(0, where, part.x);
      batch.y.index_copy_(0, where, part.y);
      for (auto& w : part.onDevice) {  // rows the device writes, at their place in the batch
        w->moveRows(at);
        batch.onDevice.push_back(std::move(w));
      }
    }
  }
  const double built = since(wall0), builtCpu = threadCpuSeconds() - cpu0;
  const auto pin0 = std::chrono::steady_clock::now();
  if (pin && !batch.x.is_cuda()) {  // only what a plugin made elsewhere than in batchMemory is copied
    if (!batch.x.is_pinned()) batch.x = batch.x.pin_memory();
    if (!batch.y.is_pinned()) batch.y = batch.y.pin_memory();
  }
  const double pinned = since(pin0);
  std::lock_guard<std::mutex> lock(timesMu_);
  ++times_.batches;
  times_.buildS += built;
  times_.buildCpuS += builtCpu;
  times_.pinS += pinned;
  return batch;
}

void BatchLoader::workerLoop() {
  while (true) {
    std::int64_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      spaceCv_.wait(lock, [&] { return stop_ || nextTask_ >= numBatches_ || nextTask_ < nextOut_ + opts_.prefetch; });
      if (stop_ || nextTask_ >= numBatches_) return;
      b = nextTask_++;
    }
    try {
      Batch batch = build(b);
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(b, std::move(batch));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      errors_.emplace(b, std::current_exception());
    }
    readyCv_.notify_all();
  }
}

bool BatchLoader::ready() {
  if (nextOut_ >= numBatches_) return true;
  if (threads_.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.count(nextOut_) > 0;  // a failed batch is not: its error is raised when it is due
}

std::optional<Batch> BatchLoader::next() {
  if (nextOut_ >= numBatches_) return std::nullopt;
  if (threads_.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    Batch b = build(nextOut_++);
    waitS_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return b;
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto t0 = std::chrono::steady_clock::now();
  readyCv_.wait(lock, [&] { return errors_.count(nextOut_) || ready_.count(nextOut_); });
  waitS_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (auto err = errors_.find(nextOut_); err != errors_.end()) std::rethrow_exception(err->second);
  auto it = ready_.find(nextOut_);
  Batch b = std::move(it->second);
  ready_.erase(it);
  ++nextOut_;
  lock.unlock();
  spaceCv_.notify_all();
  return b;
}

}  // namespace exprun
