// Purpose: data plugin `imagefolder` — an ImageNet-style folder tree (root/<split>/<class>/*.JPEG,
// torchvision's ImageFolder layout) or list files of "path label" lines, decoded with libjpeg-turbo
// (PNG with libpng) straight into normalised float batches with the torchvision recipes'
// transforms, in one pass per image that decodes only the crop's rows and columns.
// Rule: a sample's augmentation depends only on (seed, epoch, sample), so batches do not depend on
// threads or ranks. A bad image either stops the run naming the file (`on_bad_image: error`) or is
// replaced by the next good sample and counted (`skip`).
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <random>
#include <map>
#include <set>

#include "runner/api/Data.h"
#include "plugins/data/image/Augment.h"
#include "plugins/data/image/GpuJpeg.h"
#include "plugins/data/image/Image.h"
#include "plugins/data/image/ImageIndex.h"
#include "runner/util/CacheDir.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

struct ImageFolderSettings {
  std::string root, trainSplit = "train", valSplit = "val", trainList, valList;
  std::int64_t numClasses = 0, size = 224, evalSize = 0, evalResize = 0;
  double scaleMin = 0.08, scaleMax = 1.0, ratioMin = 3.0 / 4.0, ratioMax = 4.0 / 3.0;
  bool hflip = true;
  std::vector<double> mean{0.485, 0.456, 0.406}, std{0.229, 0.224, 0.225};
  bool dctScaling = true;
  std::string autoAugment = "none";
  std::int64_t raNumOps = 2, raMagnitude = 9, augmixSeverity = 3;
  std::string interpolation = "bilinear";
  double randomErasing = 0.0;
  std::string onBadImage = "error", cacheDir = "auto";
  std::string decode = "cpu";
  bool decodeRoi = true;
};
using S = ImageFolderSettings;
const OptionTable<S> kOptions{{
    field("root", &S::root, "dataset folder holding the split folders (or the list files' base)"),
    field("train_split", &S::trainSplit, "training split folder under root"),
    field("val_split", &S::valSplit, "evaluation split folder under root"),
    field("train_list", &S::trainList, "list file of 'path label' lines for training (instead of the folder)"),
    field("val_list", &S::valList, "list file of 'path label' lines for evaluation (instead of the folder)"),
    field("num_classes", &S::numClasses, "classes (0: the training split's)", {0}),
    field("size", &S::size, "training: output height and width (RandomResizedCrop's size)", {8, 4096}),
    field("eval_size", &S::evalSize, "evaluation: the centre crop's height and width (0: size; FixRes: larger than size)",
          {0, 4096}),
    field("eval_resize", &S::evalResize,
          "evaluation: shorter side resized to this before the centre crop (0: 256*eval_size/224)", {0, 8192}),
    field("scale_min", &S::scaleMin, "RandomResizedCrop: smallest area fraction", {1e-4, 1.0}),
    field("scale_max", &S::scaleMax, "RandomResizedCrop: largest area fraction", {1e-4, 1.0}),
    field("ratio_min", &S::ratioMin, "RandomResizedCrop: smallest aspect ratio w/h", {1e-3}),
    field("ratio_max", &S::ratioMax, "RandomResizedCrop: largest aspect ratio w/h", {1e-3}),
    field("hflip", &S::hflip, "training: random horizontal flip"),
    field("mean", &S::mean, "normalisation mean per channel (of pixel/255)"),
    field("std", &S::std, "normalisation standard deviation per channel"),
    field("dct_scaling", &S::dctScaling, "JPEG: downscale by M/8 while decoding when the crop is larger than the output"),
    oneOf("auto_augment", &S::autoAugment, augPolicyNames(),
          "training: augmentation policy on the 8-bit crop (torchvision's: ta_wide TrivialAugmentWide, ra "
          "RandAugment, imagenet AutoAugment, augmix AugMix)"),
    field("ra_num_ops", &S::raNumOps, "RandAugment: operations per image", {1, 10}),
    field("ra_magnitude", &S::raMagnitude, "RandAugment: magnitude bin of 31", {0, 30}),
    field("augmix_severity", &S::augmixSeverity, "AugMix: magnitudes from the first N of 10 bins", {1, 10}),
    oneOf("interpolation", &S::interpolation, {"bilinear", "nearest"}, "the augmentation policy's geometric operations"),
    field("random_erasing", &S::randomErasing,
          "training: probability of erasing a random rectangle after normalisation (torchvision's RandomErasing; 0: off)",
          {0.0, 1.0}),
    oneOf("on_bad_image", &S::onBadImage, {"error", "skip"},
           "a corrupt or unreadable image: stop naming it, or skip and count it"),
    field("cache_dir", &S::cacheDir, "folder of the cached file lists ('auto': <exprun's cache folder>/imagefolder, 'off': none)"),
    oneOf("decode", &S::decode, {"cpu", "gpu", "auto"},
          "training JPEGs: decoded by the loader's workers (cpu), or by nvJPEG on the device with the crop resampled "
          "there with the augmentation policy (gpu: CUDA, uint8 batches, no random erasing; auto: gpu where the device "
          "has JPEG engines)"),
    field("decode_roi", &S::decodeRoi,
          "data.decode: gpu: nvJPEG decodes only the crop's region (with a 16-pixel margin) where its hardware "
          "decoder can, else whole images"),
}};

// A training sample's random draws from (seed, sample), in the order both decode paths make them
// (on the host, decodeSample; for the device, deviceTakes): the flip, the crop once the image's size is
// known, then the augmentation policy's and random erasing's from `rng`.
struct SampleDraws {
  explicit SampleDraws(std::uint64_t seed) : rng(seed) {}
  double operator()() { return uni(rng); }
  std::mt19937_64 rng;
  std::uniform_real_distribution<double> uni{0.0, 1.0};
};

// Training takes RandomResizedCrop(size, scale, ratio) + horizontal flip (+ an augmentation policy
// on the 8-bit crop: TrivialAugmentWide, RandAugment, AutoAugment's ImageNet policy, AugMix; then
// random erasing on the normalised image); evaluation resizes the shorter side to `eval_resize`
// (default 256·eval_size/224) and takes the centre crop of `eval_size` (default: size; FixRes
// trains at a smaller size than it evaluates). A crop larger than the output is downscaled in the
// DCT domain while it is decoded.
class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(const ImageFolderSettings& o)
      : root_(o.root),
        trainSplit_(o.trainSplit),
        valSplit_(o.valSplit),
        trainList_(o.trainList),
        valList_(o.valList),
        size_(static_cast<int>(o.size)),
        trainSize_(size_),
        evalSize_(static_cast<int>(o.evalSize > 0 ? o.evalSize : o.size)),
        evalResize_(static_cast<int>(o.evalResize)),
        scaleMin_(o.scaleMin),
        scaleMax_(o.scaleMax),
        ratioMin_(o.ratioMin),
        ratioMax_(o.ratioMax),
        hflip_(o.hflip),
        dctScaling_(o.dctScaling),
        decode_(o.decode),
        decodeRoi_(o.decodeRoi),
        erase_(o.randomErasing),
        skipBad_(o.onBadImage == "skip"),
        numClasses_(o.numClasses) {
    if (root_.empty()) throw DataError("data.root: the imagefolder plugin needs the dataset folder (root: /path/to/imagenet)");
    if (evalResize_ == 0) evalResize_ = static_cast<int>(std::lround(256.0 * evalSize_ / 224.0));
    if (evalResize_ < evalSize_)
      throw DataError("data.eval_resize: " + std::to_string(evalResize_) + " is smaller than the evaluation crop " +
                      std::to_string(evalSize_) + " (data.eval_size, else data.size)");
    if (scaleMin_ > scaleMax_) throw DataError("data.scale_min is larger than data.scale_max");
    if (ratioMin_ > ratioMax_) throw DataError("data.ratio_min is larger than data.ratio_max");
    const auto& mean = o.mean;
    const auto& sd = o.std;
    if (mean.size() != 3) throw DataError("data.mean: expected 3 values (R, G, B), got " + std::to_string(mean.size()));
    if (sd.size() != 3) throw DataError("data.std: expected 3 values (R, G, B), got " + std::to_string(sd.size()));
    for (int c = 0; c < 3; ++c) {
      if (!(sd[c] > 0)) throw DataError("data.std: values must be positive");
      tf_.mean[c] = static_cast<float>(mean[c]);
      tf_.std[c] = static_cast<float>(sd[c]);
    }
    tf_.outWidth = tf_.outHeight = size_;
    tf_.dctScaling = dctScaling_;
    policy_.kind = augPolicyKind(o.autoAugment);
    policy_.numOps = static_cast<int>(o.raNumOps);
    policy_.magnitude = static_cast<int>(o.raMagnitude);
    policy_.severity = static_cast<int>(o.augmixSeverity);
    policy_.interpolation = o.interpolation == "nearest" ? Interpolation::Nearest : Interpolation::Bilinear;
    const std::string& cache = o.cacheDir;
    cacheDir_ = cache == "auto" ? cacheDir("imagefolder") : cache == "off" ? "" : cache;
  }

  DataInfo info() const override {
    std::int64_t classes = numClasses_;
    if (classes == 0 && !train_.paths.empty()) classes = static_cast<std::int64_t>(train_.classes.size());  // loaded
    if (classes == 0) {  // before load(): a folder listing, or the list file's labels
      try {
        classes = trainList_.empty() ? static_cast<std::int64_t>(listClassFolders(splitDir(trainSplit_)).size())
                                     : static_cast<std::int64_t>(readImageList(trainList_, root_).classes.size());
      } catch (const IndexError& e) {
        throw DataError(std::string("imagefolder: ") + e.what());
      }
    }
    return DataInfo{3, size_, size_, classes};
  }

  void load() override {
    try {
      train_ = trainList_.empty() ? indexImageFolder(splitDir(trainSplit_), cacheDir_) : readImageList(trainList_, root_);
      val_ = valList_.empty() ? indexImageFolder(splitDir(valSplit_), cacheDir_) : readImageList(valList_, root_);
    } catch (const IndexError& e) {
      throw DataError(std::string("imagefolder: ") + e.what());
    }
    if (trainList_.empty() && valList_.empty() && train_.classes != val_.classes)
      throw DataError("imagefolder: the class folders of " + splitDir(trainSplit_) + " (" +
                      std::to_string(train_.classes.size()) + ") and " + splitDir(valSplit_) + " (" +
                      std::to_string(val_.classes.size()) + ") differ");
    const std::int64_t classes = info().numClasses;
    for (const ImageIndex* idx : {&train_, &val_})
      if (static_cast<std::int64_t>(idx->classes.size()) > classes)
        throw DataError("imagefolder: " + std::to_string(idx->classes.size()) + " classes found but data.num_classes is " +
                        std::to_string(classes));
    log::info(strf("imagefolder: %zu training images, %zu validation images, %zu classes%s", train_.paths.size(),
                   val_.paths.size(), train_.classes.size(), train_.fromCache ? " (file list from the cache)" : ""));
  }

  std::int64_t size(Split s) const override { return static_cast<std::int64_t>(split(s).paths.size()); }

  Batch makeBatch(Split s, const std::vector<std::int64_t>& indices, std::uint64_t seed) const override {
    if (gpuDecode_ && s == Split::Train) {
      if (bytes_) return makeDeviceBatch(indices, seed);
      if (decode_ == "gpu") throw DataError("data.decode: gpu makes uint8 batches: set train.input: auto or uint8");
    }
    const auto& d = split(s);
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    const int side = s == Split::Train ? trainSize_ : evalSize_;
    torch::Tensor x = torch::empty({n, 3, side, side}, batchMemory(bytes_ ? torch::kUInt8 : torch::kFloat32));
    torch::Tensor y = torch::empty({n}, batchMemory(torch::kInt64));
    float* xp = bytes_ ? nullptr : x.data_ptr<float>();
    std::uint8_t* xb = bytes_ ? x.data_ptr<std::uint8_t>() : nullptr;
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    const std::int64_t per = 3LL * side * side;
    thread_local std::vector<std::uint8_t> bytes;
    const std::int64_t total = static_cast<std::int64_t>(d.paths.size());
    (void)total;
    for (std::int64_t i = 0; i < n; ++i)
      yp[i] = decodeOrNext(s, d, indices[i], seed, bytes, xp ? xp + i * per : nullptr, xb ? xb + i * per : nullptr);
    Batch b{x, y};
    if (bytes_)
      normalisationOf(std::vector<float>(tf_.mean, tf_.mean + 3), std::vector<float>(tf_.std, tf_.std + 3), b);
    return b;
  }

  // data.decode: gpu (or auto, until placeOn says the device does not decode): a training batch's
  // device work allocates the decoded images (whole: an upper bound where regions are decoded),
  // the resampling's rows and the augmentation policy's scratch (DeviceJpegDecode::deviceBytes). Estimated
  // as `batch` times the mean of up to 64 training files spread evenly over the split, their crops
  // and policies drawn with the epoch seed 0, at the training size of now; files the device does
  // not take count nothing (the workers decode them). nvJPEG's own buffers (its cudaMalloc,
  // outside PyTorch's allocator) are not counted.
  DeviceHoldings deviceHoldings(std::int64_t batch) const override {
    const bool device = placed_ ? gpuDecode_ : decode_ != "cpu" && erase_ <= 0;
    if (!device || train_.paths.empty()) return {};
    std::lock_guard<std::mutex> lock(workMu_);
    auto known = workPerImage_.find(trainSize_);  // per training size (progressive resizing changes it)
    if (known == workPerImage_.end()) {
      const std::int64_t n = static_cast<std::int64_t>(train_.paths.size()), k = std::min<std::int64_t>(n, 64);
      double sum = 0;
      for (std::int64_t i = 0; i < k; ++i) {
        const std::int64_t idx = i * n / k;
        DeviceJpeg im;
        try {
          readImageFile(train_.paths[idx], im.file);
          if (deviceCrop(train_.paths[idx], /*seed=*/0, idx, im).empty())
            sum += static_cast<double>(deviceJpegBytes(im, trainSize_, trainSize_));
        } catch (const ImageError&) {  // a bad file: the host's, as in training
        }
      }
      known = workPerImage_.emplace(trainSize_, sum / static_cast<double>(k)).first;
    }
    return {0, static_cast<std::int64_t>(std::ceil(known->second * static_cast<double>(batch)))};
  }

  // data.decode: the device decodes the training JPEGs when training on CUDA and it can.
  void placeOn(const torch::Device& device) override {
    placed_ = true;
    if (decode_ == "cpu") return;
    std::string why;
    if (!device.is_cuda()) why = "the run trains on " + device.str() + ", and the decoder is CUDA's";
    else if (erase_ > 0) why = "data.random_erasing runs on the CPU's normalised image";
    else why = whyNoGpuJpeg();
    if (why.empty()) why = whyNoKernelsOn(device);
    if (why.empty() && decode_ == "auto") why = whyNoJpegEngines(device);  // auto: only with the device's JPEG engines
    if (why.empty()) {
      gpuDecode_ = true;
      log::info("imagefolder: training JPEGs decoded on the device (data.decode: " + decode_ + ")");
    } else if (decode_ == "gpu") {
      throw DataError("data.decode: gpu: " + why + " (use data.decode: cpu or auto)");
    }
  }

  std::string whyNoBytes() const override {
    return erase_ > 0 ? "random_erasing sets pixels of the normalised image, which 8 bits cannot hold" : "";
  }
  void makeBytes() override { bytes_ = true; }

  std::int64_t skippedSamples() const override { return skipped_.load(); }
  std::int64_t hostDecodedSamples() const override {
    return gpuDecode_ ? hostDecoded_.load() + gpuJpegHostFallbacks() : 0;
  }
  std::int64_t smallestTrainSize() const override { return 8; }
  std::int64_t trainSize() const override { return trainSize_; }
  void setTrainSize(std::int64_t size) override {
    if (size < 8 || size > size_)
      throw DataError("imagefolder: training images of side " + std::to_string(size) + ": it takes 8 to data.size (" +
                      std::to_string(size_) + ")");
    trainSize_ = static_cast<int>(size);
  }

 private:
  // Sample `index` decoded on the host into `out` or `out8` (decodeSample); a bad image is replaced
  // by the next one in the split (skip mode), deterministically. Returns the label used.
  std::int64_t decodeOrNext(Split s, const ImageIndex& d, std::int64_t index, std::uint64_t seed,
                            std::vector<std::uint8_t>& bytes, float* out, std::uint8_t* out8) const {
    const std::int64_t total = static_cast<std::int64_t>(d.paths.size());
    for (std::int64_t k = 0;; ++k) {
      const std::int64_t idx = (index + k) % total;
      try {
        decodeSample(s, d, idx, seed, bytes, out, out8);
        return d.labels[idx];
      } catch (const ImageError& e) {
        if (!skipBad_)
          throw DataError(std::string("imagefolder: ") + e.what() + " (set data.on_bad_image: skip to skip such files)");
        noteBad(d.paths[idx], e.what(), k == 0);
        if (k + 1 >= std::min<std::int64_t>(total, 64))
          throw DataError("imagefolder: " + std::to_string(k + 1) + " bad images in a row from " + d.paths[index] +
                          " on; last: " + e.what());
      }
    }
  }

  // A training batch whose JPEGs the device decodes (data.decode: gpu): each file read, its header
  // parsed, its flip and crop drawn as decodeSample draws them and its resampling tables computed
  // here; a file the device's batched decoder does not take (JpegFacts::whyNotGpu, PNG, a damaged
  // header) is decoded here as before, into its uint8 row. The other rows are the DeviceJpegDecode's.
  Batch makeDeviceBatch(const std::vector<std::int64_t>& indices, std::uint64_t seed) const {
    const ImageIndex& d = train_;
    const std::int64_t n = static_cast<std::int64_t>(indices.size());
    const int side = trainSize_;
    const std::int64_t per = 3LL * side * side;
    torch::Tensor x = torch::empty({n, 3, side, side}, batchMemory(torch::kUInt8));
    torch::Tensor y = torch::empty({n}, batchMemory(torch::kInt64));
    std::uint8_t* xb = x.data_ptr<std::uint8_t>();
    std::int64_t* yp = y.data_ptr<std::int64_t>();
    thread_local std::vector<std::uint8_t> bytes;
    std::vector<DeviceJpeg> deviceJpegs;
    std::vector<std::int64_t> deviceIndex, deviceLabel;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t idx = indices[i];
      DeviceJpeg im;
      if (deviceTakes(d.paths[idx], seed, idx, im)) {
        im.row = i;
        yp[i] = d.labels[idx];
        deviceJpegs.push_back(std::move(im));
        deviceIndex.push_back(idx);
        deviceLabel.push_back(yp[i]);
        continue;
      }
      yp[i] = decodeOrNext(Split::Train, d, idx, seed, bytes, nullptr, xb + i * per);
    }
    Batch b{x, y};
    normalisationOf(std::vector<float>(tf_.mean, tf_.mean + 3), std::vector<float>(tf_.std, tf_.std + 3), b);
    if (!deviceJpegs.empty()) {
      // An image the device refuses: decoded here instead, the CPU pipeline's way (a bad file
      // replaced by the next sample, whose label the work then writes, as on_bad_image says).
      auto onHost = [this, deviceIndex, seed](std::size_t i, std::uint8_t* planes) {
        std::vector<std::uint8_t> buf;
        return decodeOrNext(Split::Train, train_, deviceIndex[i], seed, buf, nullptr, planes);
      };
      b.onDevice.push_back(
          std::make_shared<DeviceJpegDecode>(std::move(deviceJpegs), std::move(deviceLabel), side, side, onHost));
    }
    return b;
  }

  // Whether the device decodes training sample `idx` (file `path`): then `im` holds its file, crop
  // tables and flip, drawn from (seed, sample) as decodeSample draws them; else the file is left
  // to the host (counted).
  bool deviceTakes(const std::string& path, std::uint64_t seed, std::int64_t idx, DeviceJpeg& im) const {
    try {
      readImageFile(path, im.file);
      const std::string why = deviceCrop(path, seed, idx, im);
      return why.empty() ? true : hostDecodes(why);
    } catch (const ImageError& e) {
      return hostDecodes("unreadable");  // the host's decode names the file and applies on_bad_image
    }
  }
  // The header of `im.file` (file `path`, training sample `idx`) read and its flip and crop drawn
  // into `im`: "" when the device's batched decoder takes it, else why not. Throws ImageError for a
  // damaged header.
  std::string deviceCrop(const std::string& path, std::uint64_t seed, std::int64_t idx, DeviceJpeg& im) const {
    if (detectImageFormat(im.file.data(), im.file.size()) != ImageFormat::Jpeg) return "not a JPEG";
    const JpegFacts measures = readJpegFacts(im.file.data(), im.file.size(), path);
    if (std::string why = measures.whyNotGpu(); !why.empty()) return why;
    SampleDraws draws(sampleSeed(seed, idx));
    im.flip = drawFlip(draws);
    const CropBox box = drawCrop(draws, measures.width, measures.height);
    cropAxes(box, measures.width, measures.height, trainSize_, trainSize_, im.ax, im.ay);
    im.width = measures.width;
    im.height = measures.height;
    im.region = decodeRoi_ ? decodeRegion(im.ax, im.ay, im.width, im.height) : DecodeRegion{0, 0, im.width, im.height};
    if (policy_.active()) im.program = augProgram(policy_, draws.rng, trainSize_, trainSize_);  // decodeSample's draws
    im.name = path;
    return "";
  }
  bool drawFlip(SampleDraws& draws) const { return hflip_ && draws() < 0.5; }
  CropBox drawCrop(SampleDraws& draws, int width, int height) const {
    return randomResizedCrop(width, height, scaleMin_, scaleMax_, ratioMin_, ratioMax_, [&] { return draws(); });
  }
  bool hostDecodes(const std::string& why) const {
    ++hostDecoded_;
    std::lock_guard<std::mutex> lock(badMu_);
    if (hostReasons_.insert(why).second) log::info("imagefolder: data.decode: gpu: " + why + " files are decoded on the CPU");
    return false;
  }

  std::string splitDir(const std::string& split) const { return root_ + "/" + split; }
  const ImageIndex& split(Split s) const { return s == Split::Train ? train_ : val_; }

  // Sample `idx` decoded and transformed into `out` (normalised floats) or, for uint8 batches, into
  // `out8` (8-bit planes, rounded half up where resampled; the other pointer is null).
  void decodeSample(Split s, const ImageIndex& d, std::int64_t idx, std::uint64_t seed, std::vector<std::uint8_t>& bytes,
                    float* out, std::uint8_t* out8) const {
    readImageFile(d.paths[idx], bytes);
    TransformSpec tf = tf_;
    tf.outWidth = tf.outHeight = s == Split::Train ? trainSize_ : evalSize_;
    // Training rows beside the device's (data.decode: gpu), from full resolution as the device's are.
    if (s == Split::Train && gpuDecode_ && bytes_) tf.dctScaling = false;
    tf.bytesOut = out8;
    if (s == Split::Train) {
      SampleDraws draws(sampleSeed(seed, idx));
      std::mt19937_64& rng = draws.rng;
      tf.flip = drawFlip(draws);
      const auto crop = [&](int w, int h) { return drawCrop(draws, w, h); };
      if (policy_.active()) {  // the policy on the 8-bit crop, then normalised (or kept as bytes)
        thread_local Image8 img;
        img.c = 3;
        img.h = img.w = trainSize_;
        img.data.resize(static_cast<std::size_t>(3) * trainSize_ * trainSize_);
        tf.bytesOut = img.data.data();
        decodeTransformed(bytes.data(), bytes.size(), d.paths[idx], crop, tf, out);
        applyAugPolicy(policy_, rng, img);
        if (out8)
          std::copy(img.data.begin(), img.data.end(), out8);
        else
          normaliseBytes(img.data.data(), tf, out);
      } else {
        decodeTransformed(bytes.data(), bytes.size(), d.paths[idx], crop, tf, out);
      }
      if (erase_ > 0) eraseRandomRectangle(rng, erase_, out, 3, trainSize_, trainSize_);
    } else {
      decodeTransformed(bytes.data(), bytes.size(), d.paths[idx],
                        [&](int w, int h) { return resizeCenterCrop(w, h, evalResize_, evalSize_); }, tf, out);
    }
  }

  // Counts replaced samples (not the bad files tried on the way); logs each bad file once.
  void noteBad(const std::string& path, const std::string& why, bool firstTry) const {
    if (firstTry) ++skipped_;
    std::lock_guard<std::mutex> lock(badMu_);
    if (badFiles_.insert(path).second) log::warn("imagefolder: skipping a bad image: " + why);
  }

  std::string root_, trainSplit_, valSplit_, trainList_, valList_, cacheDir_;
  int size_, trainSize_, evalSize_, evalResize_;  // trainSize_: size_, or a method's smaller one
  double scaleMin_, scaleMax_, ratioMin_, ratioMax_;
  bool hflip_, dctScaling_;
  bool bytes_ = false;  // uint8 batches (train.input)
  std::string decode_;    // data.decode
  bool decodeRoi_;        // data.decode_roi
  bool gpuDecode_ = false;  // the device decodes the training JPEGs (placeOn)
  bool placed_ = false;     // placeOn was called
  mutable std::mutex workMu_;
  mutable std::map<int, double> workPerImage_;  // deviceHoldings: device bytes a training image's decode allocates, by size
  double erase_;
  bool skipBad_;
  AugPolicy policy_;
  std::int64_t numClasses_;
  TransformSpec tf_;
  ImageIndex train_, val_;
  mutable std::atomic<std::int64_t> skipped_{0};
  mutable std::mutex badMu_;
  mutable std::set<std::string> badFiles_;
  mutable std::atomic<std::int64_t> hostDecoded_{0};  // training samples the device could have decoded but not these
  mutable std::set<std::string> hostReasons_;
};

const Register<DataKind> kRegistered{
    "imagefolder", "ImageNet-style JPEG/PNG folders (root/<split>/<class>/*) or list files, decoded with libjpeg-turbo",
    kOptions.decls(),
    [](const Options& o) -> std::unique_ptr<Dataset> { return std::make_unique<ImageFolder>(kOptions.read(o)); }};

}  // namespace
}  // namespace exprun
