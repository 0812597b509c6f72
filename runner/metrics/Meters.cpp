// Purpose: memory probes and accuracy counting.
#include "runner/metrics/Meters.h"

#include "runner/metrics/CpuMemory.h"

#include <fstream>
#include <string>

#ifdef EXPRUN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace exprun {

#ifdef EXPRUN_WITH_CUDA
struct DeviceClock::Events {
  c10::cuda::CUDAEvent start{cudaEventDefault};  // with timing
  c10::DeviceIndex device;
  void record(c10::cuda::CUDAEvent& e) const { e.record(c10::cuda::getCurrentCUDAStream(device)); }
};
#else
struct DeviceClock::Events {};
#endif

DeviceClock::DeviceClock(const torch::Device& device) : device_(device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) {
    events_ = std::make_unique<Events>();
    events_->device = device.index();
  }
#endif
  reset();
}

DeviceClock::~DeviceClock() = default;

void DeviceClock::reset() {
  wall_.reset();
#ifdef EXPRUN_WITH_CUDA
  if (events_) {
    events_->start = c10::cuda::CUDAEvent(cudaEventDefault);
    events_->record(events_->start);
  }
#endif
}

double DeviceClock::seconds() const {
#ifdef EXPRUN_WITH_CUDA
  if (events_) {
    c10::cuda::CUDAEvent now(cudaEventDefault);
    events_->record(now);
    now.synchronize();
    return static_cast<double>(events_->start.elapsed_time(now)) / 1000.0;
  }
#endif
  return wall_.seconds();
}

std::int64_t cpuPeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // kB
  return -1;
}

bool resetCpuPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  return static_cast<bool>(out.flush());
}

std::int64_t peakMemoryBytes(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    return stats.allocated_bytes[0].peak;  // index 0: aggregate over pool types
  }
#endif
  return cpuPeakRssBytes();
}

std::int64_t peakAllocatedBytes(const torch::Device& device) {
  if (device.is_cuda()) return peakMemoryBytes(device);
  return cpuAllocationTracked() ? cpuPeakAllocatedBytes() : -1;
}

std::int64_t allocatedBytes(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].current;
#endif
  return cpuAllocationTracked() ? cpuAllocatedBytes() : -1;
}

void resetPeakMemory(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
    return;
  }
#endif
  resetCpuPeakRss();
  resetCpuPeakAllocated();
}

namespace {
PhasePeaks::Peaks larger(const PhasePeaks::Peaks& a, const PhasePeaks::Peaks& b) {
  return {std::max(a.memory, b.memory), std::max(a.allocated, b.allocated)};
}
}  // namespace

PhasePeaks::PhasePeaks(const torch::Device& device) : device_(device) { resetPeakMemory(device_); }

PhasePeaks::Peaks PhasePeaks::now() const { return {peakMemoryBytes(device_), peakAllocatedBytes(device_)}; }

void PhasePeaks::beginEvaluation() {
  train_ = larger(train_, now());
  resetPeakMemory(device_);
}

void PhasePeaks::endEvaluation() {
  eval_ = larger(eval_, now());
  resetPeakMemory(device_);
}

PhasePeaks::Peaks PhasePeaks::training() const { return larger(train_, now()); }

torch::Tensor topkCorrectCounts(const torch::Tensor& logits, const torch::Tensor& targets,
                                const std::vector<std::int64_t>& ks) {
  std::int64_t maxk = 0;
  for (auto k : ks) maxk = std::max(maxk, k);
  maxk = std::min<std::int64_t>(maxk, logits.size(1));
  torch::Tensor pred = std::get<1>(logits.topk(maxk, 1, true, true));  // [N, maxk]
  torch::Tensor hit = pred.eq(targets.view({-1, 1}));
  std::vector<torch::Tensor> counts;
  for (auto k : ks) counts.push_back(hit.narrow(1, 0, std::min(k, maxk)).any(1).sum());
  return torch::stack(counts);
}

std::vector<std::int64_t> topkCorrect(const torch::Tensor& logits, const torch::Tensor& targets,
                                      const std::vector<std::int64_t>& ks) {
  const torch::Tensor counts = topkCorrectCounts(logits, targets, ks).cpu();
  return std::vector<std::int64_t>(counts.data_ptr<std::int64_t>(), counts.data_ptr<std::int64_t>() + counts.numel());
}

}  // namespace exprun
