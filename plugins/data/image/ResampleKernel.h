// Purpose: the arithmetic of the crop's resampling (plugins/data/image/Image.cpp's resampleNormalise, with
// 8-bit output) for one output value, written once for the host and the CUDA kernels of the GPU
// JPEG path (plugins/data/image/GpuJpegKernels.cu): a horizontal pass over the decoded rows the crop
// needs, then a vertical pass rounded half up to 8 bits. Each product is rounded before it is added
// (no fused multiply-add on the device), in the order the CPU path adds, so that both give the
// same bits from the same decoded pixels. Plain C++, no LibTorch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define EXPRUN_HD __host__ __device__
#else
#define EXPRUN_HD
#endif

namespace exprun::resample {

// One axis's coefficients (ResampleAxis in Image.h): output o reads inputs [first[o], first[o] +
// count[o]) with weights w[o * taps + k].
struct AxisView {
  const std::int32_t* first;
  const std::int32_t* count;
  const float* w;
  std::int32_t taps;
};

EXPRUN_HD inline float mulAdd(float acc, float w, float v) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(acc, __fmul_rn(w, v));
#else
  return acc + w * v;
#endif
}

// Horizontal pass: output column x of one decoded row (`row`: RGB interleaved, its first pixel at
// column `colStart`), channel c.
EXPRUN_HD inline float horizontal(const std::uint8_t* row, std::int32_t colStart, const AxisView& ax, std::int32_t x,
                                  std::int32_t c) {
  const float* w = ax.w + static_cast<std::int64_t>(x) * ax.taps;
  const std::uint8_t* p = row + static_cast<std::int64_t>(ax.first[x] - colStart) * 3 + c;
  float s = 0.0f;
  for (std::int32_t k = 0; k < ax.count[x]; ++k) s = mulAdd(s, w[k], static_cast<float>(p[3 * k]));
  return s;
}

// Vertical pass: output (y, x, c) from the horizontal pass's rows `tmp` (row r holds decoded row
// lo + r; `stride` floats a row, RGB interleaved), clamped to [0, 255] and rounded half up.
EXPRUN_HD inline std::uint8_t vertical(const float* tmp, std::int64_t stride, std::int32_t lo, const AxisView& ay,
                                       std::int32_t y, std::int32_t x, std::int32_t c) {
  const float* w = ay.w + static_cast<std::int64_t>(y) * ay.taps;
  float acc = 0.0f;
  for (std::int32_t k = 0; k < ay.count[y]; ++k)
    acc = mulAdd(acc, w[k], tmp[static_cast<std::int64_t>(ay.first[y] + k - lo) * stride + 3 * x + c]);
  acc = acc < 0.0f ? 0.0f : (acc > 255.0f ? 255.0f : acc);
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint8_t>(floorf(__fadd_rn(acc, 0.5f)));
#else
  return static_cast<std::uint8_t>(static_cast<std::int32_t>(acc + 0.5f));  // acc + 0.5 >= 0: floor
#endif
}

}  // namespace exprun::resample
