// Purpose: batches onto the device (runner/step/Feed.h) and the uint8 batches behind train.input:
// fashion_mnist's uint8 batches normalised by the feed are its float batches bit for bit (plain,
// augmented, with a policy; within half a level where progressive resizing resamples), a training
// run with train.input: uint8 has the float run's losses, the feed hands out every batch once, in
// order, and a plugin that cannot make uint8 batches is refused naming why. On a GPU: batches copied
// ahead on the copy stream are the ones copied when due, with no synchronisation.
#include "runner/step/Device.h"
#include "runner/step/Feed.h"

#include <chrono>
#include <thread>

#include "runner/data/BatchLoader.h"
#include "runner/spec/Spec.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

#if defined(EXPRUN_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace exprun;
using exprun::test::fashionMnistData;

namespace {
// The same samples from a float plugin and a uint8 one (the feed normalising on the CPU).
void checkSameBatches(const std::vector<std::string>& sets, Split split, double tolerance) {
  auto floats = fashionMnistData(sets), bytes = fashionMnistData(sets);
  floats->load();
  bytes->load();
  REQUIRE(bytes->whyNoBytes().empty());
  bytes->makeBytes();
  const std::vector<std::int64_t> idx{5, 0, 63, 17, 8, 40};
  const Batch f = floats->makeBatch(split, idx, 42), b = bytes->makeBatch(split, idx, 42);
  CHECK((b.x.scalar_type() == torch::kUInt8));
  CHECK(b.bytes());
  const Batch placed = placedOn(b, torch::kCPU, false);
  CHECK((placed.x.scalar_type() == torch::kFloat32));
  CHECK_FALSE(placed.bytes());
  CHECK(torch::equal(placed.y, f.y));
  if (tolerance == 0)
    CHECK(torch::equal(placed.x, f.x));
  else
    CHECK((placed.x - f.x).abs().max().item<double>() <= tolerance);
}
}  // namespace

TEST_SUITE("feed") {
  TEST_CASE("on CUDA, workers that leave the training thread no core of the process are warned about") {
    const torch::Device cuda(torch::kCUDA, 0), cpu(torch::kCPU);
    const std::string w = workersWarning(16, 16, cuda);
    CHECK(w.find("train.workers 16: this process has 16 core(s)") == 0);
    CHECK(w.find("at most 15") != std::string::npos);
    CHECK(workersWarning(15, 16, cuda).empty());
    CHECK(workersWarning(2, 1, cuda).find("at most 1") != std::string::npos);
    CHECK(workersWarning(16, 16, cpu).empty());  // on the CPU the step's threads share the cores by design
    const int all = processCores(1);
    CHECK(all >= 1);
    CHECK(all <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    CHECK(processCores(2) <= all);
    CHECK(processCores(100000) >= 1);
  }

  TEST_CASE("fashion_mnist's uint8 batches, normalised, are its float batches bit for bit") {
    const std::vector<std::string> base{"data.train_limit=64", "data.test_limit=64"};
    checkSameBatches(base, Split::Test, 0);
    checkSameBatches(base, Split::Train, 0);
    auto augmented = base;
    augmented.insert(augmented.end(), {"data.random_crop_padding=4", "data.hflip=true"});
    checkSameBatches(augmented, Split::Train, 0);
    augmented.push_back("data.auto_augment=ta_wide");
    checkSameBatches(augmented, Split::Train, 0);
  }

  TEST_CASE("smaller training images: uint8 rounds the resampled pixels, half a level at most") {
    auto floats = fashionMnistData({"data.train_limit=64"}), bytes = fashionMnistData({"data.train_limit=64"});
    floats->load();
    bytes->load();
    bytes->makeBytes();
    floats->setTrainSize(17);
    bytes->setTrainSize(17);
    const std::vector<std::int64_t> idx{1, 2, 3};
    const torch::Tensor f = floats->makeBatch(Split::Train, idx, 7).x;
    const torch::Tensor b = placedOn(bytes->makeBatch(Split::Train, idx, 7), torch::kCPU, false).x;
    CHECK(b.sizes() == torch::IntArrayRef{3, 1, 17, 17});
    const double halfLevel = 0.5 / (255.0 * 0.3530) + 1e-6;
    CHECK((b - f).abs().max().item<double>() <= halfLevel);
    CHECK((b - f).abs().max().item<double>() > 0);  // it does round
  }

  TEST_CASE("random erasing and synthetic data make no uint8 batches; train.input: uint8 says why, auto falls back") {
    auto erasing = fashionMnistData({"data.train_limit=64", "data.random_erasing=0.5"});
    CHECK(erasing->whyNoBytes().find("random_erasing") != std::string::npos);
    Spec s = loadSpecFromString(test::kSmallRunSpec, "p.yaml", {"data.random_erasing=0.5", "train.input=uint8"});
    CHECK_THROWS_CONTAINING(std::invalid_argument, Trainer(s).run(""), "train.input: uint8", "random_erasing",
                            "fashion_mnist");
    Spec syn = loadSpecFromString(
        "name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic, channels: 1, height: 8, width: 8, num_classes: 3, "
        "train_size: 16, test_size: 8}\ntrain: {epochs: 1, batch_size: 8, eval: false, log_every: 0, input: uint8}\n",
        "s.yaml");
    CHECK_THROWS_CONTAINING(std::invalid_argument, Trainer(syn).run(""), "train.input: uint8", "synthetic");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(test::kSmallRunSpec, "p.yaml", {"train.input=int4"}),
                            "train.input");
    // auto on the CPU: float, as before
    const TrainOutcome a = test::trainSmallRun({"data.random_erasing=0.5"});
    CHECK(a.result["provenance"]["input"] == "float");
  }

  TEST_CASE("a training run with train.input: uint8 has the float run's losses, step for step") {
    const std::vector<std::string> sets{"data.hflip=true", "train.eval=true", "train.eval_batch_size=250"};
    auto with = [&](const char* input) {
      auto s = sets;
      s.push_back(std::string("train.input=") + input);
      return test::trainSmallRun(s).result;
    };
    const nlohmann::json f = with("float"), b = with("uint8");
    CHECK(f["provenance"]["input"] == "float");
    CHECK(b["provenance"]["input"] == "uint8");
    REQUIRE(f["epochs"].size() == 1);
    CHECK(b["epochs"][0]["train_loss"] == f["epochs"][0]["train_loss"]);
    CHECK(b["epochs"][0]["val_loss"] == f["epochs"][0]["val_loss"]);
    CHECK(b["epochs"][0]["val_top1"] == f["epochs"][0]["val_top1"]);
  }

  TEST_CASE("the feed hands out every batch once, in order; nothing runs ahead on the CPU") {
    auto d = fashionMnistData({"data.train_limit=100", "data.test_limit=10"});
    d->load();
    d->makeBytes();
    LoaderOptions lo;
    lo.batchSize = 16;
    lo.workers = 2;
    lo.seed = 3;
    BatchLoader reference(*d, Split::Train, lo), loader(*d, Split::Train, lo);
    DeviceFeed feed(loader, torch::kCPU, /*channelsLast=*/true, /*ahead=*/4);
    int n = 0;
    while (auto b = feed.next()) {
      auto r = reference.next();
      REQUIRE(r);
      CHECK(feed.inFlight() == 0);
      CHECK(b->x.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(torch::equal(b->x, placedOn(*r, torch::kCPU, false).x));
      CHECK(torch::equal(b->y, r->y));
      ++n;
    }
    CHECK(n == 7);  // 100 / 16, the last one short
    CHECK_FALSE(reference.next());
    CHECK_FALSE(feed.next());  // and stays ended
  }

  TEST_CASE("repeated augmentation keeps a uint8 batch's normalisation") {
    auto floats = fashionMnistData({"data.train_limit=300", "data.hflip=true"});
    auto bytes = fashionMnistData({"data.train_limit=300", "data.hflip=true"});
    floats->load();
    bytes->load();
    bytes->makeBytes();
    LoaderOptions lo;
    lo.batchSize = 32;
    lo.workers = 0;
    lo.repeats = 2;  // RASampler: each sample twice, each copy with its own seed
    BatchLoader f(*floats, Split::Train, lo), b(*bytes, Split::Train, lo);
    int n = 0;
    while (auto fb = f.next()) {
      auto bb = b.next();
      REQUIRE(bb);
      CHECK(bb->bytes());
      CHECK(torch::equal(placedOn(*bb, torch::kCPU, false).x, fb->x));
      ++n;
    }
    CHECK(n == 8);  // 256 of 300 kept (floor(n / 256) * 256), 32 a batch
  }

  TEST_CASE("a loader with nothing left is ready; one without workers is not until it is done") {
    auto d = fashionMnistData({"data.train_limit=20", "data.test_limit=10"});
    d->load();
    LoaderOptions lo;
    lo.batchSize = 16;
    lo.workers = 0;
    BatchLoader loader(*d, Split::Train, lo);
    CHECK_FALSE(loader.ready());
    CHECK(loader.next());
    CHECK(loader.next());
    CHECK(loader.ready());
    CHECK_FALSE(loader.next());
  }

  TEST_CASE("batches copied ahead on the copy stream are the batches copied when due, without a sync (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
#if defined(EXPRUN_WITH_CUDA)
    auto d = fashionMnistData({"data.train_limit=512", "data.test_limit=10", "data.hflip=true"});
    d->load();
    d->makeBytes();
    LoaderOptions lo;
    lo.batchSize = 64;
    lo.workers = 2;
    lo.prefetch = 8;
    lo.pinMemory = true;
    BatchLoader reference(*d, Split::Train, lo), loader(*d, Split::Train, lo);
    const torch::Device cuda(torch::kCUDA, 0);
    DeviceFeed feed(loader, cuda, true, 3);
    std::size_t most = 0;
    int n = 0;
    while (!loader.ready()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the workers make all 8 (prefetch 8)
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);  // a synchronising call throws
    while (auto b = feed.next()) {
      most = std::max(most, feed.inFlight());
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      auto r = reference.next();
      REQUIRE(r);
      CHECK(b->x.is_cuda());
      CHECK((b->x.scalar_type() == torch::kFloat32));
      CHECK(b->x.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(torch::equal(b->x.cpu(), placedOn(*r, torch::kCPU, false).x));
      CHECK(torch::equal(b->y.cpu(), r->y));
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the loader's workers catch up
      ++n;
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    CHECK(n == 8);
    CHECK(most == 3);  // it ran ahead
#endif
  }
}
