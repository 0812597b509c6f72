// Purpose: the `data` plugin kind's interface — a Dataset with a training and a test split, the
// shape of its images (DataInfo), the batches it makes, DataError for bad data files, and the
// seeds its augmentation draws from (per sample, so that augmentation does not depend on how
// samples are batched or sharded over ranks).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

enum class Split { Train, Test };

// What a model needs to know of the data: an image's shape and its classes, or (token data) the
// vocabulary and the sequence length (vocabSize > 0; then channels, height and width are 0).
struct DataInfo {
  std::int64_t channels = 3, height = 224, width = 224, numClasses = 1000;
  std::int64_t vocabSize = 0, sequenceLength = 0;
};

// Rows of a batch that the device finishes (data.decode: gpu decodes JPEGs there): the host leaves
// them unwritten in x (uint8 [N, C, H, W], contiguous), and run() writes them once x is on the
// device, on the current stream, before the batch is normalised or reordered (and may change a
// row's label in y: a bad file replaced by the next sample). On the CPU, run() finishes them on
// the host (what the tests compare with the host's own decode).
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  virtual void run(torch::Tensor& x, torch::Tensor& y) = 0;
  // The rows move: row i is row rows[i] of the batch that now holds it (repeated augmentation puts
  // parts back in order).
  virtual void moveRows(const std::vector<std::int64_t>& rows) = 0;
};

struct Batch {
  Batch() = default;
  Batch(torch::Tensor images, torch::Tensor labels) : x(std::move(images)), y(std::move(labels)) {}
  torch::Tensor x;  // float [N, C, H, W], normalised; or uint8 pixels, when `scale` is set
  torch::Tensor y;  // int64 [N]
  // A uint8 batch's normalisation, per channel: normalised = float(x) * scale + shift, each
  // rounded as the plugin's own float path rounds them (float32 multiply, then add).
  std::vector<float> scale, shift;
  std::vector<std::shared_ptr<DeviceWork>> onDevice;  // rows the device writes (run by the feed)
  bool bytes() const { return !scale.empty(); }
};
// Runs and clears `b`'s device work on `b.x` (the feed, once x is on its device).
inline void finishOnDevice(Batch& b) {
  for (auto& w : b.onDevice) w->run(b.x, b.y);
  b.onDevice.clear();
}

// The normalisation of 8-bit pixels v with per-channel `mean` and `std` (of v / 255), as the data
// plugins write it: v * (1 / (255 std)) + (-mean / std) in float32.
inline void normalisationOf(const std::vector<float>& mean, const std::vector<float>& std, Batch& b) {
  b.scale.clear();
  b.shift.clear();
  for (std::size_t c = 0; c < mean.size(); ++c) {
    b.scale.push_back(1.0f / (255.0f * std[c]));
    b.shift.push_back(-mean[c] / std[c]);
  }
}

// Whether this thread makes batches in page-locked memory: set by a loader's worker while it makes
// a batch that goes to a CUDA device (PinnedBatches), so that the plugin allocates it there and the
// loader need not copy it to pin it.
inline bool& pinnedBatchesOnThisThread() {
  thread_local bool on = false;
  return on;
}
struct PinnedBatches {
  explicit PinnedBatches(bool on) : was_(pinnedBatchesOnThisThread()) { pinnedBatchesOnThisThread() = on; }
  ~PinnedBatches() { pinnedBatchesOnThisThread() = was_; }
  PinnedBatches(const PinnedBatches&) = delete;
  PinnedBatches& operator=(const PinnedBatches&) = delete;

 private:
  bool was_;
};
// The options a data plugin allocates a batch's host tensors with (page-locked where asked above).
inline torch::TensorOptions batchMemory(torch::ScalarType type) {
  return torch::TensorOptions().dtype(type).pinned_memory(pinnedBatchesOnThisThread());
}

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Shape and classes, known from the options alone (no file is read).
  virtual DataInfo info() const = 0;
  // Reads the data; throws DataError naming the file on any problem.
  virtual void load() = 0;
  virtual std::int64_t size(Split split) const = 0;
  // The batch of samples `indices` of `split`. Training augmentation of sample i draws from
  // sampleSeed(seed, i), so it does not depend on how samples are batched or sharded over ranks.
  // Must be safe to call from several threads at once.
  virtual Batch makeBatch(Split split, const std::vector<std::int64_t>& indices, std::uint64_t seed) const = 0;
  // Training runs on `device` (called once after load(), for a CUDA device only): a plugin that can
  // make its batches there (synthetic's pool) may move to it; its batches then need no copy to the
  // device. Default: batches stay on the CPU.
  virtual void placeOn(const torch::Device& device) { (void)device; }
  // Batches of 8-bit pixels (train.input: uint8), normalised where they are used (Batch::scale and
  // shift): "" when this plugin, with its options, can make them for both splits; else why not.
  virtual std::string whyNoBytes() const { return "it makes normalised float batches only"; }
  // From now on makeBatch returns uint8 batches (called once after load(), only when whyNoBytes()
  // is ""). The pixels are those the float path normalises, rounded half up to 8 bits where that
  // path resamples in float.
  virtual void makeBytes() { throw std::logic_error("data: this plugin makes no uint8 batches"); }
  // Device memory this plugin would use on a CUDA device beside the step's own tensors, for the
  // memory planners (batch_size: auto, exprun plan): what placeOn keeps there, and what the device
  // work of one training batch of `batch` samples allocates while it runs (data.decode: gpu),
  // estimated from the training files after load(). Before placeOn it answers for a device that
  // takes everything the options ask of it.
  struct DeviceHoldings {
    std::int64_t resident = 0;  // kept there for the run (synthetic's image pool)
    std::int64_t work = 0;      // one batch's device work, while it runs
  };
  virtual DeviceHoldings deviceHoldings(std::int64_t batch) const {
    (void)batch;
    return {};
  }
  // Samples replaced so far because their file was bad (data plugins that can skip such files).
  virtual std::int64_t skippedSamples() const { return 0; }
  // Samples decoded on the host although the device decodes this plugin's images (files its
  // decoder does not take), so far.
  virtual std::int64_t hostDecodedSamples() const { return 0; }
  // Training images of a smaller side than info()'s (height = width), for methods that change the
  // resolution between epochs (progressive resizing): the smallest side the plugin takes (0: it
  // takes no other than info()'s, which is the largest).
  virtual std::int64_t smallestTrainSize() const { return 0; }
  // The training images' side now (info()'s unless setTrainSize changed it).
  virtual std::int64_t trainSize() const { return info().height; }
  // Training batches from now on have sides `size` (evaluation keeps its own). Called between
  // epochs, while no batch is being made. Throws DataError outside [smallestTrainSize(), info()'s].
  virtual void setTrainSize(std::int64_t size) {
    throw DataError("data: this data plugin makes training images of one size only (asked for " +
                    std::to_string(size) + ")");
  }
};

// splitmix64's finaliser after its increment: a well-mixed 64-bit value of `x` (seeds derived
// from seeds: the epoch's order and augmentation, a resumed rank's random stream).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Seed of sample `index`'s augmentation in the epoch whose seed is `epochSeed` (splitmix64).
inline std::uint64_t sampleSeed(std::uint64_t epochSeed, std::int64_t index) {
  std::uint64_t x = epochSeed ^ (static_cast<std::uint64_t>(index) * 0x9E3779B97F4A7C15ull);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace exprun
