// Purpose: the data room's readers and loader (runner/data/): the IDX reader on the real
// Fashion-MNIST files and on truncated / corrupted copies; the batch loader's determinism whatever
// its worker count, a new order each epoch, an epoch resumed at any position on any number of
// ranks, a worker's error rethrown; repeated augmentation (RASampler's order, a seed per copy).
#include <zlib.h>

#include <chrono>
#include <ctime>
#include <map>
#include <thread>
#include <set>

#include "runner/api/Data.h"
#include "runner/data/BatchLoader.h"
#include "plugins/data/image/Idx.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::kFashionMnistRoot;
using exprun::test::fashionMnistData;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {
std::string gzip(const std::string& raw) {
  uLongf n = compressBound(raw.size()) + 64;
  std::string out(n, '\0');
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  zs.avail_in = static_cast<uInt>(raw.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}
// A dataset whose batches say which samples they hold (y: the index) and with which augmentation
// seed (x: the sample's seed, folded to a float).
class IndexData : public Dataset {
 public:
  explicit IndexData(std::int64_t n) : n_(n) {}
  DataInfo info() const override { return DataInfo{1, 1, 1, 10}; }
  void load() override {}
  std::int64_t size(Split) const override { return n_; }
  Batch makeBatch(Split, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
    torch::Tensor x = torch::empty({static_cast<std::int64_t>(indices.size()), 1, 1, 1});
    for (std::size_t i = 0; i < indices.size(); ++i)
      x[static_cast<std::int64_t>(i)].fill_(static_cast<double>(sampleSeed(seed, indices[i]) % 1000003));
    return Batch{x, torch::tensor(indices, torch::kInt64)};
  }

 private:
  std::int64_t n_;
};

// Every (index, seed) a rank's loader gives, in order.
std::vector<std::pair<std::int64_t, double>> drawn(const Dataset& d, LoaderOptions lo) {
  BatchLoader loader(d, Split::Train, lo);
  std::vector<std::pair<std::int64_t, double>> out;
  while (auto b = loader.next())
    for (std::int64_t i = 0; i < b->y.size(0); ++i) out.emplace_back(b->y[i].item<std::int64_t>(), b->x[i].item<double>());
  return out;
}

}  // namespace

TEST_SUITE("loader") {
  TEST_CASE("the IDX reader reads the real files") {
    IdxArray labels = readIdx(std::string(kFashionMnistRoot) + "/t10k-labels-idx1-ubyte.gz", 1);
    CHECK(labels.dims == std::vector<std::int64_t>{10000});
    std::vector<int> counts(10, 0);
    for (auto l : labels.data) counts.at(l)++;
    for (int c : counts) CHECK(c == 1000);  // the test split is balanced
    IdxArray images = readIdx(std::string(kFashionMnistRoot) + "/t10k-images-idx3-ubyte.gz", 3);
    CHECK(images.dims == std::vector<std::int64_t>{10000, 28, 28});
    CHECK(images.data.size() == 10000u * 784u);
  }

  TEST_CASE("truncated, corrupted and malformed IDX files are errors naming the file") {
    TempDir dir;
    const std::string real = readText(std::string(kFashionMnistRoot) + "/t10k-labels-idx1-ubyte.gz");
    writeText(dir.file("truncated.gz"), real.substr(0, real.size() / 2));
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("truncated.gz"), 1), "truncated.gz", "truncated");
    std::string corrupt = real;
    for (size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 16; ++i) corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5A);
    writeText(dir.file("corrupt.gz"), corrupt);
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("corrupt.gz"), 1), "corrupt.gz", "corrupt");
    writeText(dir.file("notidx.gz"), gzip("hello, this is not an IDX file"));
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("notidx.gz"), 1), "notidx.gz", "not an IDX file");
    writeText(dir.file("short.gz"), gzip(std::string("\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", 10)));
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("short.gz"), 1), "short.gz", "header promises 5 bytes");
    writeText(dir.file("rank.gz"), gzip(std::string("\x00\x00\x08\x01\x00\x00\x00\x01\x07", 9)));
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("rank.gz"), 3), "has 1 dimensions, expected 3");
    CHECK_THROWS_CONTAINING(IdxError, readIdx(dir.file("absent.gz"), 1), "absent.gz", "cannot open");
  }

  TEST_CASE("batch loader: same batches whatever the worker count; a new order each epoch") {
    auto d = fashionMnistData({"data.train_limit=1000", "data.test_limit=10", "data.random_crop_padding=2"});
    d->load();
    auto collect = [&](int workers, std::int64_t epoch) {
      LoaderOptions lo;
      lo.batchSize = 64;
      lo.seed = 5;
      lo.epoch = epoch;
      lo.workers = workers;
      lo.prefetch = 3;
      BatchLoader loader(*d, Split::Train, lo);
      CHECK(loader.numBatches() == 16);  // 15 full + 1 of 40
      std::vector<Batch> out;
      while (auto b = loader.next()) out.push_back(*b);
      return out;
    };
    auto a = collect(0, 1), b = collect(3, 1), c = collect(2, 2);
    REQUIRE(a.size() == 16);
    REQUIRE(b.size() == 16);
    CHECK(a.back().y.size(0) == 40);
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK(torch::equal(a[i].x, b[i].x));
      CHECK(torch::equal(a[i].y, b[i].y));
    }
    CHECK_FALSE(torch::equal(a[0].y, c[0].y));
    auto perm = epochPermutation(1000, 5, 1);
    std::vector<std::int64_t> sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < 1000; ++i) CHECK(sorted[i] == i);
    CHECK(perm == epochPermutation(1000, 5, 1));
    CHECK(perm != epochPermutation(1000, 5, 2));
  }

  TEST_CASE("batch loader: an epoch resumed at any position, on any number of ranks, sees the rest of the order once") {
    auto d = fashionMnistData({"data.train_limit=200", "data.test_limit=10"});
    d->load();
    const std::vector<std::int64_t> order = epochPermutation(200, 9, 3);
    // The positions W ranks of batch b hand out from `start` on, batch by batch, in position order.
    auto handedOut = [&](int w, std::int64_t b, std::int64_t start) {
      std::vector<std::vector<double>> perRank;
      std::int64_t batches = -1;
      for (int r = 0; r < w; ++r) {
        LoaderOptions lo;
        lo.batchSize = b;
        lo.seed = 9;
        lo.epoch = 3;
        lo.workers = 0;
        lo.rank = r;
        lo.worldSize = w;
        lo.startSample = start;
        BatchLoader loader(*d, Split::Train, lo);
        if (batches < 0) batches = loader.numBatches();
        CHECK(loader.numBatches() == batches);  // every rank runs the same number of steps
        CHECK(loader.consumedAfter(0) == start);
        std::vector<double> labels;
        std::int64_t k = 0;
        while (auto batch = loader.next()) {
          ++k;
          // after k batches each, the ranks together consumed [start, consumedAfter(k))
          CHECK(loader.consumedAfter(k) == std::min(start + w * k * b, start + w * ((200 - start + w - 1) / w)));
          for (std::int64_t i = 0; i < batch->y.size(0); ++i) labels.push_back(batch->x[i].sum().item<double>());
        }
        perRank.push_back(labels);
      }
      // interleave: rank r's i-th sample is position start + r + w*i
      std::vector<double> out;
      for (std::size_t i = 0; i < perRank[0].size(); ++i)
        for (int r = 0; r < w; ++r) out.push_back(perRank[r][i]);
      return out;
    };
    auto labelsOf = [&](std::int64_t from, std::int64_t to) {  // of order[from, to), padding from the order's start
      std::vector<double> out;
      for (std::int64_t p = from; p < to; ++p) {
        Batch one = d->makeBatch(Split::Train, {order[p < 200 ? p : p - 200]}, 0);
        out.push_back(one.x[0].sum().item<double>());
      }
      return out;
    };
    // An image's pixel sum stands in for the sample (no augmentation here: a sample's image is fixed).
    for (int w : {1, 2, 3, 4})
      for (std::int64_t start : {0, 48, 96, 144, 197, 200, 260}) {
        CAPTURE(w);
        CAPTURE(start);
        const std::int64_t rest = std::max<std::int64_t>(0, 200 - start);
        const std::int64_t padded = (rest + w - 1) / w * w;
        CHECK(handedOut(w, 8, start) == labelsOf(std::min<std::int64_t>(start, 200), std::min<std::int64_t>(start, 200) + padded));
      }
    // 2 ranks x 8 stopped after 6 batches each (position 96) and resumed on 4 ranks x 8: the same
    // positions as 4 ranks x 8 from the start, from batch 3 on.
    auto fresh4 = handedOut(4, 8, 0), resumed4 = handedOut(4, 8, 96);
    CHECK(std::vector<double>(fresh4.begin() + 96, fresh4.end()) == resumed4);
  }

  TEST_CASE("repeated augmentation: RASampler's order over the ranks, a seed of its own for every copy") {
    const IndexData data(1000);
    const std::vector<std::int64_t> perm = epochPermutation(1000, 7, 2);
    // RASampler, written out: each index 3 times in a row, padded to the ranks from the beginning,
    // rank r every W-th from r, its first floor(n / 256) * 256 / W kept.
    const auto expected = [&](int world, int rank) {
      std::vector<std::int64_t> rep;
      for (std::int64_t i : perm)
        for (int k = 0; k < 3; ++k) rep.push_back(i);
      const std::size_t total = (rep.size() + world - 1) / world * world;
      for (std::size_t i = 0; rep.size() < total; ++i) rep.push_back(rep[i]);
      std::vector<std::int64_t> mine;
      for (std::size_t i = static_cast<std::size_t>(rank); i < rep.size(); i += static_cast<std::size_t>(world)) mine.push_back(rep[i]);
      mine.resize(static_cast<std::size_t>(1000 / 256 * 256 / world));
      return mine;
    };
    LoaderOptions lo;
    lo.batchSize = 32;
    lo.seed = 7;
    lo.epoch = 2;
    lo.workers = 1;
    lo.repeats = 3;
    std::map<std::int64_t, std::set<double>> seeds;  // the augmentation seeds each sample got
    for (int world : {1, 2, 4})
      for (int rank = 0; rank < world; ++rank) {
        CAPTURE(world);
        CAPTURE(rank);
        lo.worldSize = world;
        lo.rank = rank;
        const auto got = drawn(data, lo);
        std::vector<std::int64_t> indices;
        for (const auto& [i, seed] : got) indices.push_back(i), seeds[i].insert(seed);
        CHECK(indices == expected(world, rank));
      }
    // The copies of a sample are augmented apart: three seeds (the same three whatever the ranks).
    CHECK(seeds.at(perm[0]).size() == 3);
    CHECK(seeds.at(perm[100]).size() == 3);
    // Two ranks of batch B take the same positions as one process of batch 2B; the copies of a
    // sample go to different ranks.
    lo.worldSize = 2;
    lo.rank = 0;
    const auto r0 = drawn(data, lo);
    lo.rank = 1;
    const auto r1 = drawn(data, lo);
    CHECK(r0[0].first == perm[0]);
    CHECK(r1[0].first == perm[0]);
    CHECK(r0[0].second != r1[0].second);
    // Resumed inside the epoch: the rest of the order.
    lo.worldSize = 1;
    lo.rank = 0;
    const auto all = drawn(data, lo);
    lo.startSample = 100;
    const auto rest = drawn(data, lo);
    REQUIRE(rest.size() == all.size() - 100);
    CHECK(std::equal(rest.begin(), rest.end(), all.begin() + 100));
    CHECK_THROWS_CONTAINING(SpecError, fashionMnistData({"train.repeated_augmentation=0"}), "train.repeated_augmentation");
  }

  TEST_CASE("batch loader: the workers' wall-clock and CPU time on the batches") {
    // A plugin whose batches wait 20 ms (as for a core or a lock) and then compute a while.
    struct Waiting : IndexData {
      Waiting() : IndexData(40) {}
      Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        auto threadCpu = [] {
          timespec ts{};
          clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
          return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
        };
        volatile double sink = 0;
        const double cpu0 = threadCpu();
        while (threadCpu() - cpu0 < 0.005) sink = sink + 1.0;  // 5 ms of this thread's CPU
        return IndexData::makeBatch(s, indices, seed);
      }
    } data;
    for (int workers : {0, 2}) {
      LoaderOptions lo;
      lo.batchSize = 8;
      lo.workers = workers;
      BatchLoader loader(data, Split::Train, lo);
      std::int64_t n = 0;
      while (loader.next()) ++n;
      const LoaderTimes t = loader.times();
      CAPTURE(workers);
      CHECK(n == 5);
      CHECK(t.batches == 5);
      CHECK(t.buildS >= 5 * 0.020);            // each batch's wait counts in the wall-clock time
      CHECK(t.buildCpuS >= 5 * 0.004);         // and its work in the CPU time
      CHECK(t.buildCpuS < t.buildS - 5 * 0.015);  // but its wait does not
      CHECK(t.pinS >= 0);
    }
  }

  TEST_CASE("batch loader rethrows a worker's error") {
    struct Failing : Dataset {
      DataInfo info() const override { return {}; }
      void load() override {}
      std::int64_t size(Split) const override { return 10; }
      Batch makeBatch(Split, const std::vector<std::int64_t>& idx, std::uint64_t) const override {
        if (idx[0] >= 4) throw DataError("broken sample");
        return Batch{torch::zeros({1}), torch::zeros({1})};
      }
    } failing;
    LoaderOptions lo;
    lo.batchSize = 2;
    lo.shuffle = false;
    lo.workers = 2;
    BatchLoader loader(failing, Split::Train, lo);
    CHECK(loader.next().has_value());
    CHECK(loader.next().has_value());
    // A failed batch is not ready (a feed topping up does not pull it early); next() raises its error.
    CHECK_FALSE(loader.ready());
    CHECK_THROWS_CONTAINING(DataError, loader.next(), "broken sample");
  }

  TEST_CASE("batch memory is page-locked only where a loader for a CUDA device makes the batch") {
    CHECK_FALSE(batchMemory(torch::kUInt8).pinned_memory());
    {
      const PinnedBatches on(true);
      CHECK(batchMemory(torch::kFloat32).pinned_memory());
      CHECK((batchMemory(torch::kFloat32).dtype() == torch::kFloat32));
      {
        const PinnedBatches off(false);
        CHECK_FALSE(batchMemory(torch::kInt64).pinned_memory());
      }
      CHECK(batchMemory(torch::kInt64).pinned_memory());
    }
    CHECK_FALSE(batchMemory(torch::kUInt8).pinned_memory());
    // The loader's workers ask for it only for a CUDA device (pinMemory): on the CPU nothing is
    // pinned, and a worker thread leaves the flag as it found it.
    auto d = fashionMnistData({"data.train_limit=64", "data.test_limit=10"});
    d->load();
    LoaderOptions lo;
    lo.batchSize = 32;
    lo.workers = 0;
    BatchLoader loader(*d, Split::Train, lo);
    while (auto b = loader.next()) CHECK_FALSE(b->x.is_pinned());
    CHECK_FALSE(pinnedBatchesOnThisThread());
  }

  TEST_CASE("a loader for a CUDA device gets batches the plugin made page-locked, without a copy (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    auto d = fashionMnistData({"data.train_limit=64", "data.test_limit=10"});
    d->load();
    {
      const PinnedBatches on(true);
      const Batch b = d->makeBatch(Split::Train, {0, 1, 2}, 7);
      CHECK(b.x.is_pinned());
      CHECK(b.y.is_pinned());
    }
    LoaderOptions lo;
    lo.batchSize = 32;
    lo.workers = 2;
    lo.pinMemory = true;
    BatchLoader loader(*d, Split::Train, lo);
    while (auto b = loader.next()) CHECK(b->x.is_pinned());
  }
}
