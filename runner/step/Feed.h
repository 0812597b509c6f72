// Purpose: batches onto the training device. A DeviceFeed takes a BatchLoader's batches (float, or
// uint8 pixels with their normalisation: train.input) and hands them out on the device as the step
// uses them: x normalised to float32 there (a uint8 batch crosses in a quarter of float's bytes), in
// channels_last when the run is, y as int64.
// Rule: on the CPU a uint8 batch is normalised with the same float32 arithmetic as the data plugins'
// own float path, so a uint8 run gives the float run's numbers where no resampling rounds.
#pragma once

#include <deque>
#include <memory>
#include <optional>

#include "runner/api/Data.h"
#include "runner/data/BatchLoader.h"

namespace exprun {

// `b` with x as normalised float32 (a uint8 batch normalised with its scale and shift) on `device`,
// channels_last when asked (copies non_blocking: a page-locked batch's copy is asynchronous).
Batch placedOn(Batch b, const torch::Device& device, bool channelsLast);

// On CUDA, `ahead` batches are copied ahead of the step on a stream of their own (train.copy_ahead),
// from the page-locked memory the loader makes them in, so the copies overlap the step: the step's
// stream waits for each copy's event only when the batch is due, and the batch's memory is recorded
// on that stream so the caching allocator does not reuse it early. Ahead, the feed only takes
// batches the loader has ready (it never waits for one while it holds one); it waits only when it
// holds none. On the CPU nothing runs ahead: each batch is normalised when due.
class DeviceFeed {
 public:
  // The batches of `loader` (which outlives the feed).
  DeviceFeed(BatchLoader& loader, const torch::Device& device, bool channelsLast, int ahead);
  ~DeviceFeed();
  DeviceFeed(const DeviceFeed&) = delete;
  DeviceFeed& operator=(const DeviceFeed&) = delete;

  // The next batch on the device (see placedOn), or none after the last.
  std::optional<Batch> next();
  // Batches copied (or being copied) ahead of the one next() hands out (for tests).
  std::size_t inFlight() const { return queue_.size(); }

 private:
  struct InFlight;
  struct Copier;  // the CUDA copy stream (absent on the CPU or with ahead 0)
  bool pull();    // one batch from the loader into the queue; false after the last
  Batch finish(Batch b);

  BatchLoader& loader_;
  torch::Device device_;
  bool channelsLast_;
  std::size_t ahead_;
  bool done_ = false;
  std::deque<std::unique_ptr<InFlight>> queue_;
  std::unique_ptr<Copier> copier_;
  std::vector<float> scaleKey_, shiftKey_;  // the normalisation of scale_ and shift_, on the device
  torch::Tensor scale_, shift_;
};

}  // namespace exprun
