// Purpose: data plugin `fashion_mnist` — the four IDX .gz files of Fashion-MNIST (60,000 train /
// 10,000 test 28x28 greyscale images, 10 classes), normalised, with optional random crop with
// zero padding and horizontal flip on the training split. `train_limit`/`test_limit` take a prefix
// subset for quick runs and tests.
#include <random>

#include "runner/data/Idx.h"
#include "runner/registry/Plugins.h"

namespace exprun {
namespace {

class FashionMnist : public Dataset {
 public:
  explicit FashionMnist(const Options& o)
      : root_(o.getString("root")),
        mean_(static_cast<float>(o.getFloat("mean"))),
        std_(static_cast<float>(o.getFloat("std"))),
        pad_(o.getInt("random_crop_padding")),
        flip_(o.getBool("hflip")),
        trainLimit_(o.getInt("train_limit")),
        testLimit_(o.getInt("test_limit")) {}

  DataInfo info() const override { return DataInfo{1, 28, 28, 10}; }

  void load() override {
    train_ = loadSplit("train", 60000, trainLimit_);
    test_ = loadSplit("t10k", 10000, testLimit_);
  }

  std::int64_t size(Split s) const override { return static_cast<std::int64_t>(split(s).labels.size()); }

  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
    const auto& d = split(s);
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    torch::Tensor x = torch::empty({n, 1, 28, 28}, torch::kFloat32);
    torch::Tensor y = torch::empty({n}, torch::kInt64);
    float* xp = x.data_ptr<float>();
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    const bool augment = s == Split::Train && (pad_ > 0 || flip_);
    const float scale = 1.0f / (255.0f * std_), shift = -mean_ / std_;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint8_t* src = d.images.data() + indices[i] * 784;
      float* dst = xp + i * 784;
      yp[i] = d.labels[indices[i]];
      std::int64_t dx = 0, dy = 0;
      bool flip = false;
      if (augment) {
        std::mt19937_64 rng(sampleSeed(seed, indices[i]));
        if (pad_ > 0) {
          std::uniform_int_distribution<std::int64_t> off(-pad_, pad_);
          dy = off(rng);
          dx = off(rng);
        }
        if (flip_) flip = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
      }
      for (std::int64_t r = 0; r < 28; ++r) {
        const std::int64_t sr = r + dy;
        for (std::int64_t c = 0; c < 28; ++c) {
          const std::int64_t sc0 = flip ? 27 - c : c;
          const std::int64_t sc = sc0 + dx;
          const float v = (sr >= 0 && sr < 28 && sc >= 0 && sc < 28) ? src[sr * 28 + sc] : 0.0f;
          dst[r * 28 + c] = v * scale + shift;
        }
      }
    }
    return Batch{x, y};
  }

 private:
  struct Data {
    std::vector<std::uint8_t> images;
    std::vector<std::int64_t> labels;
  };
  const Data& split(Split s) const { return s == Split::Train ? train_ : test_; }

  Data loadSplit(const std::string& prefix, std::int64_t expected, std::int64_t limit) const {
    const std::string imgPath = root_ + "/" + prefix + "-images-idx3-ubyte.gz";
    const std::string lblPath = root_ + "/" + prefix + "-labels-idx1-ubyte.gz";
    IdxArray img, lbl;
    try {
      img = readIdx(imgPath, 3);
      lbl = readIdx(lblPath, 1);
    } catch (const IdxError& e) {
      throw DataError(std::string("fashion_mnist: ") + e.what());
    }
    if (img.dims[0] != expected || img.dims[1] != 28 || img.dims[2] != 28)
      throw DataError("fashion_mnist: " + imgPath + ": expected " + std::to_string(expected) + " images of 28x28, found " +
                      std::to_string(img.dims[0]) + "x" + std::to_string(img.dims[1]) + "x" + std::to_string(img.dims[2]));
    if (lbl.dims[0] != expected)
      throw DataError("fashion_mnist: " + lblPath + ": expected " + std::to_string(expected) + " labels, found " +
                      std::to_string(lbl.dims[0]));
    const std::int64_t n = limit > 0 ? std::min(limit, expected) : expected;
    Data d;
    d.images.assign(img.data.begin(), img.data.begin() + n * 784);
    d.labels.reserve(static_cast<size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      if (lbl.data[i] > 9)
        throw DataError("fashion_mnist: " + lblPath + ": label " + std::to_string(lbl.data[i]) + " of sample " +
                        std::to_string(i) + " is not a class 0-9");
      d.labels.push_back(lbl.data[i]);
    }
    return d;
  }

  std::string root_;
  float mean_, std_;
  std::int64_t pad_;
  bool flip_;
  std::int64_t trainLimit_, testLimit_;
  Data train_, test_;
};

const bool kRegistered = (dataRegistry().add(
                              "fashion_mnist", "Fashion-MNIST from its four IDX .gz files",
                              {stringOpt("root", std::string("/usr/share/datasets/fashion-mnist"),
                                         "directory holding the four *-idx?-ubyte.gz files"),
                               floatOpt("mean", 0.2860, "normalisation mean (of pixel/255)"),
                               floatOpt("std", 0.3530, "normalisation standard deviation (of pixel/255)", 1e-6),
                               intOpt("random_crop_padding", 0, "train: random 28x28 crop of the zero-padded image (0: off)", 0, 14),
                               boolOpt("hflip", false, "train: random horizontal flip"),
                               intOpt("train_limit", 0, "use only the first N training samples (0: all)", 0),
                               intOpt("test_limit", 0, "use only the first N test samples (0: all)", 0)},
                              [](const Options& o) -> std::unique_ptr<Dataset> { return std::make_unique<FashionMnist>(o); }),
                          true);

}  // namespace
}  // namespace exprun
