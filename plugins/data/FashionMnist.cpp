// Purpose: data plugin `fashion_mnist` — the four IDX .gz files of Fashion-MNIST (28x28 greyscale
// images, 10 classes), normalised, with optional training augmentation in torchvision's presets'
// order: random crop with zero padding, horizontal flip, an augmentation policy on the 8-bit image
// (plugins/data/image/Augment.h) and random erasing (a rectangle of 2-33 % of the image, aspect
// ratio 0.3-3.3, set to 0 after normalisation). A method can make training images smaller (8 to 28
// pixels a side, the crop resized with an antialiased bilinear filter: progressive_resize).
// `train_limit` / `test_limit` take a prefix subset for quick runs and tests.
#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "runner/api/Data.h"
#include "plugins/data/image/Augment.h"
#include "plugins/data/image/Idx.h"
#include "plugins/data/image/Image.h"

namespace exprun {
namespace {

struct FashionMnistSettings {
  std::string root = "/usr/share/datasets/fashion-mnist";
  double mean = 0.2860;
  double std = 0.3530;
  std::int64_t randomCropPadding = 0;
  bool hflip = false;
  double randomErasing = 0.0;
  std::string autoAugment = "none";
  std::int64_t raNumOps = 2, raMagnitude = 9, augmixSeverity = 3;
  std::string interpolation = "bilinear";
  std::int64_t trainLimit = 0;
  std::int64_t testLimit = 0;
};
const OptionTable<FashionMnistSettings> kOptions{{
    field("root", &FashionMnistSettings::root, "directory holding the four *-idx?-ubyte.gz files"),
    field("mean", &FashionMnistSettings::mean, "normalisation mean (of pixel/255)"),
    field("std", &FashionMnistSettings::std, "normalisation standard deviation (of pixel/255)", {1e-6}),
    field("random_crop_padding", &FashionMnistSettings::randomCropPadding,
          "train: random 28x28 crop of the zero-padded image (0: off)", {0, 14}),
    field("hflip", &FashionMnistSettings::hflip, "train: random horizontal flip"),
    field("random_erasing", &FashionMnistSettings::randomErasing,
          "train: probability of erasing a random rectangle (torchvision's RandomErasing; 0: off)", {0.0, 1.0}),
    oneOf("auto_augment", &FashionMnistSettings::autoAugment, augPolicyNames(),
          "train: augmentation policy (torchvision's: ta_wide TrivialAugmentWide, ra RandAugment, imagenet "
          "AutoAugment, augmix AugMix)"),
    field("ra_num_ops", &FashionMnistSettings::raNumOps, "RandAugment: operations per image", {1, 10}),
    field("ra_magnitude", &FashionMnistSettings::raMagnitude, "RandAugment: magnitude bin of 31", {0, 30}),
    field("augmix_severity", &FashionMnistSettings::augmixSeverity, "AugMix: magnitudes from the first N of 10 bins",
          {1, 10}),
    oneOf("interpolation", &FashionMnistSettings::interpolation, {"bilinear", "nearest"},
          "the augmentation policy's geometric operations"),
    field("train_limit", &FashionMnistSettings::trainLimit, "use only the first N training samples (0: all)", {0}),
    field("test_limit", &FashionMnistSettings::testLimit, "use only the first N test samples (0: all)", {0}),
}};

class FashionMnist : public Dataset {
 public:
  explicit FashionMnist(const FashionMnistSettings& s)
      : policy_(policyOf(s)),
        root_(s.root),
        mean_(static_cast<float>(s.mean)),
        std_(static_cast<float>(s.std)),
        pad_(s.randomCropPadding),
        flip_(s.hflip),
        erase_(s.randomErasing),
        trainLimit_(s.trainLimit),
        testLimit_(s.testLimit) {}

  DataInfo info() const override { return DataInfo{1, 28, 28, 10}; }

  void load() override {
    train_ = loadSplit("train", 60000, trainLimit_);
    test_ = loadSplit("t10k", 10000, testLimit_);
  }

  std::int64_t size(Split s) const override { return static_cast<std::int64_t>(split(s).labels.size()); }

  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
    const auto& d = split(s);
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    const std::int64_t side = s == Split::Train ? trainSize_ : 28, area = side * side;
    torch::Tensor x = torch::empty({n, 1, side, side}, batchMemory(bytes_ ? torch::kUInt8 : torch::kFloat32));
    torch::Tensor y = torch::empty({n}, batchMemory(torch::kInt64));
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    const bool augment = s == Split::Train && (pad_ > 0 || flip_ || erase_ > 0 || policy_.active());
    const float scale = 1.0f / (255.0f * std_), shift = -mean_ / std_;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint8_t* src = d.images.data() + indices[i] * 784;
      // Pixel k of the sample, a value in [0, 255] (fractional where resampled): normalised, or
      // rounded half up to 8 bits (uint8 batches, normalised where they are used).
      float* dst = bytes_ ? nullptr : x.data_ptr<float>() + i * area;
      std::uint8_t* bdst = bytes_ ? x.data_ptr<std::uint8_t>() + i * area : nullptr;
      const auto emit = [&](std::size_t k, float v) {
        if (bdst)
          bdst[k] = static_cast<std::uint8_t>(std::floor(std::clamp(v, 0.0f, 255.0f) + 0.5f));
        else
          dst[k] = v * scale + shift;
      };
      yp[i] = d.labels[indices[i]];
      std::int64_t dx = 0, dy = 0;
      bool flip = false;
      std::optional<std::mt19937_64> rng;
      if (augment) {
        rng.emplace(sampleSeed(seed, indices[i]));
        if (pad_ > 0) {
          std::uniform_int_distribution<std::int64_t> off(-pad_, pad_);
          dy = off(*rng);
          dx = off(*rng);
        }
        if (flip_) flip = std::uniform_int_distribution<int>(0, 1)(*rng) == 1;
      }
      const auto pixel = [&](std::int64_t r, std::int64_t c) -> std::uint8_t {
        const std::int64_t sr = r + dy, sc = (flip ? 27 - c : c) + dx;
        return (sr >= 0 && sr < 28 && sc >= 0 && sc < 28) ? src[sr * 28 + sc] : 0;
      };
      if (side != 28) {  // a smaller training size: the crop resized (bilinear, antialiased)
        std::vector<float> full(784), small(static_cast<std::size_t>(area));
        for (std::int64_t r = 0; r < 28; ++r)
          for (std::int64_t c = 0; c < 28; ++c) full[static_cast<std::size_t>(r * 28 + c)] = pixel(r, c);
        resizePlanes(full.data(), 1, 28, 28, small.data(), static_cast<int>(side), static_cast<int>(side));
        if (augment && policy_.active()) {
          Image8 img{1, static_cast<int>(side), static_cast<int>(side), std::vector<std::uint8_t>(small.size())};
          for (std::size_t k = 0; k < small.size(); ++k)
            img.data[k] = static_cast<std::uint8_t>(std::floor(std::clamp(small[k], 0.0f, 255.0f) + 0.5f));
          applyAugPolicy(policy_, *rng, img);
          for (std::size_t k = 0; k < small.size(); ++k) emit(k, img.data[k]);
        } else {
          for (std::size_t k = 0; k < small.size(); ++k) emit(k, small[k]);
        }
      } else if (augment && policy_.active()) {  // the policy on the 8-bit crop, then normalised
        Image8 img{1, 28, 28, std::vector<std::uint8_t>(784)};
        for (std::int64_t r = 0; r < 28; ++r)
          for (std::int64_t c = 0; c < 28; ++c) img.data[static_cast<std::size_t>(r * 28 + c)] = pixel(r, c);
        applyAugPolicy(policy_, *rng, img);
        for (std::size_t k = 0; k < 784; ++k) emit(k, img.data[k]);
      } else {
        for (std::int64_t r = 0; r < 28; ++r)
          for (std::int64_t c = 0; c < 28; ++c) emit(static_cast<std::size_t>(r * 28 + c), pixel(r, c));
      }
      if (augment && erase_ > 0) eraseRandomRectangle(*rng, erase_, dst, 1, static_cast<int>(side), static_cast<int>(side));
    }
    Batch b{x, y};
    if (bytes_) normalisationOf({mean_}, {std_}, b);
    return b;
  }

  std::string whyNoBytes() const override {
    return erase_ > 0 ? "random_erasing sets pixels of the normalised image, which 8 bits cannot hold" : "";
  }
  void makeBytes() override { bytes_ = true; }

  std::int64_t smallestTrainSize() const override { return 8; }
  std::int64_t trainSize() const override { return trainSize_; }
  void setTrainSize(std::int64_t size) override {
    if (size < 8 || size > 28)
      throw DataError("fashion_mnist: training images of side " + std::to_string(size) + ": it takes 8 to 28");
    trainSize_ = size;
  }

 private:
  static AugPolicy policyOf(const FashionMnistSettings& s) {
    AugPolicy p;
    p.kind = augPolicyKind(s.autoAugment);
    p.numOps = static_cast<int>(s.raNumOps);
    p.magnitude = static_cast<int>(s.raMagnitude);
    p.severity = static_cast<int>(s.augmixSeverity);
    p.interpolation = s.interpolation == "nearest" ? Interpolation::Nearest : Interpolation::Bilinear;
    return p;
  }

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
      throw DataError("fashion_mnist: " + imgPath + ": expected " + std::to_string(expected) +
                      " images of 28x28, found " + std::to_string(img.dims[0]) + "x" + std::to_string(img.dims[1]) +
                      "x" + std::to_string(img.dims[2]));
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

  AugPolicy policy_;
  std::string root_;
  float mean_, std_;
  std::int64_t pad_;
  bool flip_;
  double erase_;
  std::int64_t trainLimit_, testLimit_;
  std::int64_t trainSize_ = 28;  // the training images' side (progressive resizing makes it smaller)
  bool bytes_ = false;           // uint8 batches (train.input)
  Data train_, test_;
};

const Register<DataKind> kRegistered{
    "fashion_mnist", "Fashion-MNIST from its four IDX .gz files", kOptions.decls(),
    [](const Options& o) -> std::unique_ptr<Dataset> { return std::make_unique<FashionMnist>(kOptions.read(o)); }};

}  // namespace
}  // namespace exprun
