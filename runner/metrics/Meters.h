// Purpose: what the trainer measures: wall time, peak memory (CPU: peak resident set via
// /proc/self/status VmHWM, reset through /proc/self/clear_refs; CUDA: caching-allocator peak),
// and top-k correct counts.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>

namespace exprun {

class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count(); }
  void reset() { t0_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// Seconds of work since reset(): on a GPU from CUDA events recorded on the device's current
// stream (the device's own time; reading it waits for the work queued so far), on the CPU the
// wall clock.
class DeviceClock {
 public:
  explicit DeviceClock(const torch::Device& device);
  ~DeviceClock();
  DeviceClock(const DeviceClock&) = delete;
  DeviceClock& operator=(const DeviceClock&) = delete;
  void reset();
  double seconds() const;

 private:
  struct Events;  // the CUDA events (Meters.cpp), on a GPU only
  torch::Device device_;
  std::unique_ptr<Events> events_;
  Stopwatch wall_;
};

// Peak resident set size of this process in bytes (VmHWM), or -1 if unavailable.
std::int64_t cpuPeakRssBytes();
// Resets the peak resident set to the current one; false if the kernel refused.
bool resetCpuPeakRss();

// Peak memory of the device the run uses, since the last resetPeakMemory().
std::int64_t peakMemoryBytes(const torch::Device& device);
// Peak bytes of live tensors since the last resetPeakMemory(): CUDA's caching-allocator figure, on
// the CPU the tracking allocator's (CpuMemory.h); -1 on a CPU without the tracking installed.
std::int64_t peakAllocatedBytes(const torch::Device& device);
// Bytes of live tensors now: CUDA's caching-allocator figure, on the CPU the tracking
// allocator's; -1 on a CPU without the tracking installed.
std::int64_t allocatedBytes(const torch::Device& device);
void resetPeakMemory(const torch::Device& device);  // both peaks

// An epoch's peak memory kept apart by phase: the training steps' and the evaluations'. The
// device's peaks are reset when it is made and around each evaluation; what they reached in
// between goes to the phase that ran (an evaluation's batches, larger than the training
// micro-batch, would otherwise hide what recomputation saves in the training step).
class PhasePeaks {
 public:
  struct Peaks {
    std::int64_t memory = -1;     // peakMemoryBytes (-1: the phase did not run)
    std::int64_t allocated = -1;  // peakAllocatedBytes (-1: not measured, or the phase did not run)
  };
  explicit PhasePeaks(const torch::Device& device);
  void beginEvaluation();  // the peaks so far are training's; reset
  void endEvaluation();    // the peaks since beginEvaluation() are the evaluation's; reset
  Peaks training() const;  // the steps since the last evaluation included
  const Peaks& evaluation() const { return eval_; }

 private:
  Peaks now() const;
  torch::Device device_;
  Peaks train_, eval_;
};

// Number of rows of `logits` whose target is among the k largest scores, for each k in ks: as an
// int64 tensor [ks] on the logits' device (nothing read on the host), or read into a vector.
torch::Tensor topkCorrectCounts(const torch::Tensor& logits, const torch::Tensor& targets,
                                const std::vector<std::int64_t>& ks);
std::vector<std::int64_t> topkCorrect(const torch::Tensor& logits, const torch::Tensor& targets,
                                      const std::vector<std::int64_t>& ks);

}  // namespace exprun
