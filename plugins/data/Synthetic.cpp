// Purpose: data plugin `synthetic` — random images of a given shape and class count, for
// throughput and memory runs without a dataset. A pool of distinct random images is made once;
// sample i is pool image i mod pool_size, its label a fixed hash of i.
#include <cstring>
#include <random>

#include "runner/registry/Plugins.h"

namespace exprun {
namespace {

class Synthetic : public Dataset {
 public:
  explicit Synthetic(const Options& o)
      : info_{o.getInt("channels"), o.getInt("height"), o.getInt("width"), o.getInt("num_classes")},
        trainSize_(o.getInt("train_size")),
        testSize_(o.getInt("test_size")),
        pool_(o.getInt("pool_size")),
        seed_(static_cast<std::uint64_t>(o.getInt("seed"))) {}

  DataInfo info() const override { return info_; }

  void load() override {
    torch::Generator gen = torch::make_generator<torch::CPUGeneratorImpl>(seed_);
    images_ = torch::randn({pool_, info_.channels, info_.height, info_.width}, gen, torch::kFloat32);
  }

  std::int64_t size(Split s) const override { return s == Split::Train ? trainSize_ : testSize_; }

  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t) const override {
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    const std::int64_t per = info_.channels * info_.height * info_.width;
    torch::Tensor x = torch::empty({n, info_.channels, info_.height, info_.width}, torch::kFloat32);
    torch::Tensor y = torch::empty({n}, torch::kInt64);
    const float* src = images_.data_ptr<float>();
    float* dst = x.data_ptr<float>();
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    const std::uint64_t salt = s == Split::Train ? 0x9E3779B97F4A7C15ull : 0xC2B2AE3D27D4EB4Full;
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * per, src + (indices[i] % pool_) * per, sizeof(float) * per);
      std::uint64_t h = (static_cast<std::uint64_t>(indices[i]) + 1) * salt;
      h ^= h >> 31;
      yp[i] = static_cast<std::int64_t>(h % static_cast<std::uint64_t>(info_.numClasses));
    }
    return Batch{x, y};
  }

 private:
  DataInfo info_;
  std::int64_t trainSize_, testSize_, pool_;
  std::uint64_t seed_;
  torch::Tensor images_;
};

const bool kRegistered = (dataRegistry().add(
                              "synthetic", "random images for throughput runs (labels carry no signal)",
                              {intOpt("channels", 3, "image channels", 1), intOpt("height", 224, "image height", 1),
                               intOpt("width", 224, "image width", 1), intOpt("num_classes", 1000, "classes", 2),
                               intOpt("train_size", 12800, "training samples per epoch", 1),
                               intOpt("test_size", 1000, "test samples", 1),
                               intOpt("pool_size", 64, "distinct random images generated", 1),
                               intOpt("seed", 0, "seed of the random images", 0)},
                              [](const Options& o) -> std::unique_ptr<Dataset> { return std::make_unique<Synthetic>(o); }),
                          true);

}  // namespace
}  // namespace exprun
