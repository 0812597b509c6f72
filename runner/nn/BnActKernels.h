// Purpose: the CUDA kernels of the fused batch norm (runner/nn/BnAct.h): act(bn(x) + z) over a
// channels_last tensor seen as a row-major [rows, C] matrix (rows = N·H·W), forward and backward,
// bf16 / fp16 / fp32 activations with fp32 statistics. Plain CUDA, no torch headers (nvcc compiles
// this file alone, fast); runner/nn/BnAct.cpp allocates, checks and calls. Every function launches
// on `stream` and returns the launch's error (cudaSuccess when none).
// Rule: grids are fixed by the shape and the device's SM count, with no atomics: results are
// deterministic.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace exprun::bnact {

enum class Dtype : int { F32 = 0, F16 = 1, BF16 = 2 };
// After the normalisation (and the residual add): nothing, max(v, 0), or min(max(v, 0), 6).
// NaN passes through either, as ATen's relu and hardtanh; the backward mask is ATen's:
// relu passes the gradient where the output is not <= 0, relu6 where it is neither <= 0 nor >= 6.
enum class Act : int { None = 0, Relu = 1, Relu6 = 2 };

// Per batch norm a training step launches six kernels: statistics (per-block Welford partials, then
// one warp per channel merging them in double and updating the running statistics), the normalise +
// add + activation pass, the backward sums (partials, merge) and the backward elementwise pass.
struct Shape {
  std::int64_t rows = 0;  // N·H·W
  int channels = 0;       // C
  int sms = 1;            // the device's multiprocessors: sizes the reduction grids
};

// Floats of scratch that stats() and backwardSums() need for `s` (partials of the block rows).
std::int64_t scratchFloats(const Shape& s);

// Per channel over the rows of x: mean and biased variance (float). If `invstd` is not null also
// 1/sqrt(var + eps), and if `runningMean` is not null the running statistics updated as
// BatchNorm2d does: r = (1 - momentum)·r + momentum·batch, with the unbiased variance.
cudaError_t stats(Dtype t, const void* x, const Shape& s, float* scratch, float* mean, float* var, float* invstd,
                  double eps, double momentum, float* runningMean, float* runningVar, cudaStream_t stream);

// invstd and the running statistics from given statistics (synchronized batch norm's global ones,
// over `count` values per channel; evaluation's running ones with runningMean null). A count summed
// over ranks stays in device memory: `countOnDevice`, when not null, is read instead of `count`.
cudaError_t finalize(int channels, const float* mean, const float* var, double count, const double* countOnDevice,
                     float* invstd, double eps, double momentum, float* runningMean, float* runningVar,
                     cudaStream_t stream);

// y = act((x - mean)·invstd·weight + bias [+ z]); z may be null. y may be null in the backward
// functions when act is none (it is not read then).
cudaError_t apply(Dtype t, const void* x, const void* z, void* y, const Shape& s, const float* mean,
                  const float* invstd, const float* weight, const float* bias, Act act, cudaStream_t stream);

// Backward sums per channel, with g = dy masked by act's derivative at y:
// sumDy = Σ g, sumDyXhat = Σ g·(x - mean)·invstd (these are the bias' and the weight's gradients).
cudaError_t backwardSums(Dtype t, const void* dy, const void* y, const void* x, const Shape& s, const float* mean,
                         const float* invstd, Act act, float* scratch, float* sumDy, float* sumDyXhat,
                         cudaStream_t stream);

// dx = weight·invstd·(g - sumDy/count - x̂·sumDyXhat/count), and dz = g when dz is not null
// (the residual's gradient). `count`: values per channel the sums ran over; all ranks' when
// synchronized, then read from `countOnDevice` when that is not null.
cudaError_t backwardApply(Dtype t, const void* dy, const void* y, const void* x, void* dx, void* dz, const Shape& s,
                          const float* mean, const float* invstd, const float* weight, const float* sumDy,
                          const float* sumDyXhat, double count, const double* countOnDevice, Act act,
                          cudaStream_t stream);

// The entry points above as a table: runner/nn/BnAct.cpp calls the kernels through one, the real
// kernels' for CUDA tensors. `sms` sizes the grids where no device says it (host memory).
struct Kernels {
  decltype(&::exprun::bnact::scratchFloats) scratchFloats;
  decltype(&::exprun::bnact::stats) stats;
  decltype(&::exprun::bnact::finalize) finalize;
  decltype(&::exprun::bnact::apply) apply;
  decltype(&::exprun::bnact::backwardSums) backwardSums;
  decltype(&::exprun::bnact::backwardApply) backwardApply;
  int sms;
};

}  // namespace exprun::bnact
