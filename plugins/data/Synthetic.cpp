// Purpose: data plugin `synthetic` — random images of a given shape and class count, for
// throughput and memory runs without a dataset. A pool of distinct random images is made once;
// sample i is pool image i mod pool_size, its label a fixed hash of i. Training on a GPU, the pool
// lives on the device and batches are gathered there (no image crosses the bus).
#include <chrono>
#include <cstring>
#include <thread>
#include <random>

#include "runner/api/Data.h"

namespace exprun {
namespace {

struct SyntheticSettings {
  std::int64_t channels = 3, height = 224, width = 224, numClasses = 1000;
  std::int64_t trainSize = 12800, testSize = 1000, poolSize = 64, seed = 0;
  double batchDelayMs = 0;
};
const OptionTable<SyntheticSettings> kOptions{{
    field("channels", &SyntheticSettings::channels, "image channels", {1}),
    field("height", &SyntheticSettings::height, "image height", {1}),
    field("width", &SyntheticSettings::width, "image width", {1}),
    field("num_classes", &SyntheticSettings::numClasses, "classes", {2}),
    field("train_size", &SyntheticSettings::trainSize, "training samples per epoch", {1}),
    field("test_size", &SyntheticSettings::testSize, "test samples", {1}),
    field("pool_size", &SyntheticSettings::poolSize, "distinct random images generated", {1}),
    field("seed", &SyntheticSettings::seed, "seed of the random images", {0}),
    field("batch_delay_ms", &SyntheticSettings::batchDelayMs,
          "milliseconds each batch takes to make (a sleep: slow storage or decoding, for data-bound studies)", {0.0}),
}};

class Synthetic : public Dataset {
 public:
  explicit Synthetic(const SyntheticSettings& s)
      : info_{s.channels, s.height, s.width, s.numClasses},
        trainSize_(s.trainSize),
        testSize_(s.testSize),
        pool_(s.poolSize),
        seed_(static_cast<std::uint64_t>(s.seed)),
        delay_(s.batchDelayMs) {}

  DataInfo info() const override { return info_; }

  void load() override {
    torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(seed_);
    images_ = torch::randn({pool_, info_.channels, info_.height, info_.width}, gen, torch::kFloat32);
  }

  std::int64_t size(Split s) const override { return s == Split::Train ? trainSize_ : testSize_; }

  // On a GPU the pool moves to the device (the same images: generated on the CPU first), and a batch
  // is gathered there: only its indices and labels cross, page-locked, without waiting.
  void placeOn(const torch::Device& device) override {
    if (!device.is_cuda()) return;
    images_ = images_.to(device);
    device_ = device;
  }

  // The pool, float32, on the device.
  DeviceHoldings deviceHoldings(std::int64_t) const override {
    return {pool_ * info_.channels * info_.height * info_.width * static_cast<std::int64_t>(sizeof(float)), 0};
  }

  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t) const override {
    if (delay_ > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay_));
    if (device_.is_cuda()) return onDevice(s, indices);
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    const std::int64_t per = info_.channels * info_.height * info_.width;
    torch::Tensor x = torch::empty({n, info_.channels, info_.height, info_.width}, batchMemory(torch::kFloat32));
    torch::Tensor y = torch::empty({n}, batchMemory(torch::kInt64));
    const float* src = images_.data_ptr<float>();
    float* dst = x.data_ptr<float>();
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * per, src + (indices[i] % pool_) * per, sizeof(float) * per);
      yp[i] = labelOf(s, indices[i]);
    }
    return Batch{x, y};
  }

 private:
  // A fixed hash of the sample's index: the label, the same wherever the batch is made.
  std::int64_t labelOf(Split s, std::int64_t index) const {
    const std::uint64_t salt = s == Split::Train ? 0x9E3779B97F4A7C15ull : 0xC2B2AE3D27D4EB4Full;
    std::uint64_t h = (static_cast<std::uint64_t>(index) + 1) * salt;
    h ^= h >> 31;
    return static_cast<std::int64_t>(h % static_cast<std::uint64_t>(info_.numClasses));
  }

  Batch onDevice(Split s, const std::vector<std::int64_t>& indices) const {
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    // pool rows, labels; page-locked
    torch::Tensor host = torch::empty({2, n}, torch::TensorOptions(torch::kInt64).pinned_memory(true));
    std::int64_t* rows = host.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      rows[i] = indices[static_cast<std::size_t>(i)] % pool_;
      rows[n + i] = labelOf(s, indices[static_cast<std::size_t>(i)]);
    }
    const torch::Tensor both = host.to(device_, /*non_blocking=*/true);
    return Batch{images_.index_select(0, both[0]), both[1]};
  }

  DataInfo info_;
  std::int64_t trainSize_, testSize_, pool_;
  std::uint64_t seed_;
  double delay_;
  torch::Tensor images_;
  torch::Device device_{torch::kCPU};
};

const Register<DataKind> kRegistered{
    "synthetic", "random images for throughput runs (labels carry no signal)", kOptions.decls(),
    [](const Options& o) -> std::unique_ptr<Dataset> { return std::make_unique<Synthetic>(kOptions.read(o)); }};

}  // namespace
}  // namespace exprun
