// Purpose: hardware efficiency — FLOPs counted from the operators a model really runs, and the
// device's peak FLOP/s measured by a GEMM benchmark (cached per host), for MFU = achieved / peak.
//
// FLOPs are counted as fvcore and PyTorch's FlopCounterMode count them: the matrix products only
// (aten::convolution, aten::convolution_backward, aten::mm, addmm, bmm, baddbmm), 2 FLOPs per
// multiply-add; elementwise ops, norms and pooling are left out (they are bandwidth, not FLOPs).
// The counter sees every operator dispatched on any thread while it lives (one at a time).
#pragma once

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/metrics/Hardware.h"

namespace exprun {

class FlopCounter {
 public:
  FlopCounter();
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;
  double flops() const;

 private:
  std::uint64_t handle_;
};

// The FLOPs of one training step of `model` per image: a batch of 2 zero images of shape
// [channels, height, width] forward, cross-entropy, backward (in float32 on the CPU; precision does
// not change the count). `forward` alone and `total` (forward + backward). The model's gradients
// are left as they were (undefined); batch-norm statistics move, so pass a throwaway model.
struct StepFlops {
  double forward = 0, total = 0;
};
StepFlops countStepFlops(torch::nn::Module& model, std::int64_t channels, std::int64_t height, std::int64_t width,
                         const std::function<torch::Tensor(torch::Tensor)>& forward);
// The same for any input: `x` forward, `loss` of the output backward, the FLOPs divided by
// `units` (the samples, or tokens, that x holds).
StepFlops countStepFlops(torch::nn::Module& model, const torch::Tensor& x, std::int64_t units,
                         const std::function<torch::Tensor(torch::Tensor)>& forward,
                         const std::function<torch::Tensor(const torch::Tensor&)>& loss);

// Peak FLOP/s of `device` for GEMMs in `dtype` with the current intra-op threads: the best of
// three timed rounds of square matrix products (CPU 1024², CUDA 8192²; smaller where one product
// of that side would not fit in a round), each about `seconds` long.
double measurePeakFlops(const torch::Device& device, torch::ScalarType dtype, double seconds = 0.3);

struct PeakFlops {
  double flopsPerS = 0;
  std::string key;         // what was measured: device name, dtype, threads
  bool cached = false;     // read from the cache
  bool cacheable = false;  // measured now: two measurements agreed within 5 % on an idle machine
};
// measurePeakFlops() twice (the larger kept), cached in <cache dir>/peak_flops.json by device name,
// dtype and threads (runner/util/CacheDir.h) only when the two agree within 5 % and the machine is
// idle (1-minute load average below a quarter of its CPUs + 0.5). `refresh` measures again. A
// cache that cannot be read or written is measured around, with no error. MFU's denominator is
// the rule of metrics/Hardware.h; this measurement is for devices no rule fits, and `exprun peak`.
PeakFlops peakFlops(const torch::Device& device, torch::ScalarType dtype, bool refresh = false);
// The caching rule: the two measurements within 5 % of the larger, and the 1-minute load average
// below a quarter of the logical CPUs + 0.5 (a test suite running two jobs, or a build, is not idle).
bool steadyEnoughToCache(double first, double second, double load1, unsigned cpus);

// The device's name: the CUDA device's, or the CPU's model name ("cpu" when unknown).
std::string deviceName(const torch::Device& device);
// The device's peak for `precision` by rule (metrics/Hardware.h): the CUDA device's by name, the
// CPU's with `threads` threads; flopsPerS 0 where no rule fits.
PeakRule peakRule(const torch::Device& device, Precision precision, int threads);
// What the device computes natively: the CPU's features, or the CUDA device's from its compute capability.
std::vector<std::string> deviceFeatures(const torch::Device& device);

}  // namespace exprun
