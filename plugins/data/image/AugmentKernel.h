// Purpose: the augmentation policies (plugins/data/image/Augment.h) as a program for the device
// (data.decode: gpu): the host draws a sample's operations as the CPU path draws them and turns each
// into an instruction with its computed parameters (augProgram, in Augment.cpp); the arithmetic of
// every instruction on one value is written here once, for the host's executor (runAugProgram) and
// the CUDA kernel (GpuJpegKernels.cu). Plain C++, no LibTorch. Images are planar, 3 planes of h x w.
// Rule: results equal the CPU path's bit for bit: products and sums are rounded one by one (no fused
// multiply-add on the device) in its order, and per-image reductions are integers.
#pragma once

#include <cmath>
#include <cstdint>

#if !defined(EXPRUN_HD)
#if defined(__CUDACC__)
#define EXPRUN_HD __host__ __device__
#else
#define EXPRUN_HD
#endif
#endif

namespace exprun::augk {

// One instruction. The image an instruction works on is the sample's, or inside an AugMix chain
// (between ChainBegin and ChainEnd) the chain's copy of it.
enum Code : std::int32_t {
  kIdentity,
  kWarp,          // f[0..5]: the affine grid's float matrix (Augment.cpp's warp); i0: 1 nearest, 0 bilinear
  kRot90,         // i0: k (torch.rot90)
  kScale,         // Brightness: v * f[0]
  kBlendLuma,     // Color: blended with its luma, v * f[0] + luma * f[1]
  kBlendMean,     // Contrast: blended with the mean of its luma, v * f[0] + mean * f[1]
  kSharpness,     // f[0]: 1 - factor
  kMask,          // Posterize: v & i0
  kSolarize,      // f[0]: threshold
  kAutoContrast,
  kEqualize,
  kInvert,
  kMixBegin,      // AugMix: mix = f[0] * image (floats)
  kChainBegin,    // the chain's image = a copy of the sample's
  kChainEnd,      // mix += f[0] * the chain's image
  kMixEnd,        // image = mix, clamped and truncated
};

struct Instr {
  std::int32_t code = kIdentity;
  std::int32_t i0 = 0;
  float f[6] = {0, 0, 0, 0, 0, 0};
};

EXPRUN_HD inline float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
EXPRUN_HD inline float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
EXPRUN_HD inline float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
EXPRUN_HD inline float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
EXPRUN_HD inline float roundEven(float v) {  // std::nearbyint in the default rounding mode
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return std::nearbyint(v);
#endif
}
EXPRUN_HD inline float floorOf(float v) {
#if defined(__CUDA_ARCH__)
  return floorf(v);
#else
  return std::floor(v);
#endif
}
EXPRUN_HD inline float clamp255(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }
// .clamp_(0, 255).to(torch.uint8): truncation.
EXPRUN_HD inline std::uint8_t toByte(float v) { return static_cast<std::uint8_t>(clamp255(v)); }

// Output pixel (i, j) of plane k of the affine warp of `src` (planar h x w): grid_sample with zero
// fill, then rounded.
EXPRUN_HD inline std::uint8_t warpAt(const std::uint8_t* src, int h, int w, const float* t, int nearest, int i, int j,
                                     int k) {
  const float yo = sub(static_cast<float>(i), mul(0.5f, static_cast<float>(h - 1)));
  const float xo = sub(static_cast<float>(j), mul(0.5f, static_cast<float>(w - 1)));
  const float gx = add(add(mul(xo, t[0]), mul(yo, t[1])), t[2]);
  const float gy = add(add(mul(xo, t[3]), mul(yo, t[4])), t[5]);
  const float ix = div(sub(mul(add(gx, 1.0f), static_cast<float>(w)), 1.0f), 2.0f);
  const float iy = div(sub(mul(add(gy, 1.0f), static_cast<float>(h)), 1.0f), 2.0f);
  const std::uint8_t* p = src + static_cast<std::int64_t>(k) * h * w;
  float v = 0.0f;
  if (nearest) {
    const int x = static_cast<int>(roundEven(ix)), y = static_cast<int>(roundEven(iy));
    if (x >= 0 && x < w && y >= 0 && y < h) v = p[y * w + x];
  } else {
    const float fx = floorOf(ix), fy = floorOf(iy);
    const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
    const float ax = sub(ix, fx), ay = sub(iy, fy);
    auto at = [&](int x, int y) -> float { return x >= 0 && x < w && y >= 0 && y < h ? p[y * w + x] : 0.0f; };
    const float bx = sub(1.0f, ax), by = sub(1.0f, ay);
    v = add(add(add(mul(mul(at(x0, y0), bx), by), mul(mul(at(x0 + 1, y0), ax), by)), mul(mul(at(x0, y0 + 1), bx), ay)),
            mul(mul(at(x0 + 1, y0 + 1), ax), ay));
  }
  return static_cast<std::uint8_t>(clamp255(roundEven(v)));
}

// The source index of output (i, j) of torch.rot90(k) in a plane of h x w.
EXPRUN_HD inline int rot90From(int h, int w, int k, int i, int j) {
  const int si = k == 1 ? j : k == 2 ? h - 1 - i : w - 1 - j;
  const int sj = k == 1 ? w - 1 - i : k == 2 ? w - 1 - j : i;
  return si * w + sj;
}

// The floored luma of pixel `at` (planes `plane` bytes apart).
EXPRUN_HD inline float lumaAt(const std::uint8_t* img, std::int64_t plane, std::int64_t at) {
  return floorOf(add(add(mul(static_cast<float>(img[at]), 0.2989f), mul(static_cast<float>(img[plane + at]), 0.587f)),
                     mul(static_cast<float>(img[2 * plane + at]), 0.114f)));
}

EXPRUN_HD inline std::uint8_t blendOf(std::uint8_t v, float other, float ratio, float rest) {
  return toByte(add(mul(static_cast<float>(v), ratio), mul(other, rest)));
}

// Sharpness at interior pixel (i, j) of plane `p` (w wide): the 3 x 3 kernel, rounded, blended.
EXPRUN_HD inline std::uint8_t sharpnessAt(const std::uint8_t* p, int w, float keep, int i, int j) {
  const float a = 1.0f / 13.0f, b = 5.0f / 13.0f;
  float s = 0.0f;
  for (int di = -1; di <= 1; ++di)
    for (int dj = -1; dj <= 1; ++dj)
      s = add(s, mul(static_cast<float>(p[(i + di) * w + j + dj]), di == 0 && dj == 0 ? b : a));
  const float x = p[i * w + j];
  return toByte(add(x, mul(keep, sub(roundEven(s), x))));
}

// AutoContrast's stretch of one value, from the channel's minimum and maximum.
EXPRUN_HD inline std::uint8_t stretchOf(std::uint8_t v, int lo, int hi) {
  float l = static_cast<float>(lo);
  float inv = mul(sub(static_cast<float>(hi), l), 1.0f / 255.0f);
  if (hi == lo) l = 0.0f, inv = 1.0f;
  return toByte(div(sub(static_cast<float>(v), l), inv));
}

// Equalize's table for one channel of n pixels from its histogram (any integer counts: the host's
// int64, the kernel's shared unsigned ints); false when the channel stays as it is.
template <typename Count>
EXPRUN_HD inline bool equalizeTable(const Count* hist, std::int64_t n, std::uint8_t* lut) {
  int last = 255;
  while (last > 0 && hist[last] == 0) --last;
  const std::int64_t step = (n - static_cast<std::int64_t>(hist[last])) / 255;
  if (step == 0) return false;
  lut[0] = 0;
  std::int64_t cum = 0;
  for (int k = 1; k < 256; ++k) {
    cum += static_cast<std::int64_t>(hist[k - 1]);
    const std::int64_t v = (cum + step / 2) / step;
    lut[k] = static_cast<std::uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v));
  }
  return true;
}

// Contrast's mean of the luma: the sum of the floored lumas over n pixels.
EXPRUN_HD inline float meanOf(std::int64_t lumaSum, std::int64_t n) {
  return static_cast<float>(static_cast<double>(lumaSum) / static_cast<double>(n));
}

}  // namespace exprun::augk
