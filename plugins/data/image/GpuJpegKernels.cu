// Purpose: the crop's resampling on the device (GpuJpegKernels.h).
#include "plugins/data/image/GpuJpegKernels.h"
#include "plugins/data/image/ResampleKernel.h"

namespace exprun::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerImage = 32;

__global__ void horizontalPass(const CropJob* jobs, int outW, const std::int32_t* ints, const float* floats) {
  const CropJob j = jobs[blockIdx.y];
  const resample::AxisView ax{ints + j.xFirst, ints + j.xCount, floats + j.xW, j.xTaps};
  const std::int64_t total = static_cast<std::int64_t>(j.rows) * outW * 3;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i % 3);
    const int x = static_cast<int>((i / 3) % outW);
    const int r = static_cast<int>(i / (3 * outW));
    j.tmp[i] = resample::horizontal(j.src + static_cast<std::int64_t>(j.lo + r - j.y0) * j.pitch, j.x0, ax, x, c);
  }
}

__global__ void verticalPass(const CropJob* jobs, int outW, int outH, const std::int32_t* ints, const float* floats) {
  const CropJob j = jobs[blockIdx.y];
  const resample::AxisView ay{ints + j.yFirst, ints + j.yCount, floats + j.yW, j.yTaps};
  const std::int64_t plane = static_cast<std::int64_t>(outW) * outH;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < 3 * plane;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(i / plane);
    const int y = static_cast<int>((i % plane) / outW);
    const int x = static_cast<int>(i % outW);
    const int xo = j.flip ? outW - 1 - x : x;
    j.dst[c * plane + static_cast<std::int64_t>(y) * outW + xo] =
        resample::vertical(j.tmp, 3LL * outW, j.lo, ay, y, x, c);
  }
}

constexpr int kAugThreads = 512;

// One image's program, a block per image: every thread walks the same instructions; out-of-place
// instructions read a copy of the image (scratch); the per-channel reductions are integers in
// shared memory, the same in any order.
__global__ void __launch_bounds__(kAugThreads) augmentKernel(const AugJob* jobs, int h, int w, const augk::Instr* program) {
  const AugJob j = jobs[blockIdx.x];
  const std::int64_t plane = static_cast<std::int64_t>(h) * w, total = 3 * plane;
  __shared__ unsigned int hist[3][256];
  __shared__ std::uint8_t lut[3][256];
  __shared__ int lo[3], hi[3], keep[3];
  __shared__ unsigned long long lumaSum;
  const int t = threadIdx.x, nt = blockDim.x;
  bool inChain = false;
  for (int k = 0; k < j.count; ++k) {
    const augk::Instr in = program[j.first + k];
    std::uint8_t* cur = inChain ? j.chain : j.img;
    const bool outOfPlace = in.code == augk::kWarp || in.code == augk::kRot90 || in.code == augk::kBlendLuma ||
                            in.code == augk::kSharpness;
    if (outOfPlace) {
      for (std::int64_t i = t; i < total; i += nt) j.scratch[i] = cur[i];
      __syncthreads();
    }
    switch (in.code) {
      case augk::kWarp:
        for (std::int64_t i = t; i < total; i += nt) {
          const int c = static_cast<int>(i / plane), y = static_cast<int>((i % plane) / w), x = static_cast<int>(i % w);
          cur[i] = augk::warpAt(j.scratch, h, w, in.f, in.i0, y, x, c);
        }
        break;
      case augk::kRot90:
        for (std::int64_t i = t; i < total; i += nt) {
          const int c = static_cast<int>(i / plane), y = static_cast<int>((i % plane) / w), x = static_cast<int>(i % w);
          cur[i] = j.scratch[c * plane + augk::rot90From(h, w, in.i0, y, x)];
        }
        break;
      case augk::kScale:
        for (std::int64_t i = t; i < total; i += nt) cur[i] = augk::toByte(augk::mul(static_cast<float>(cur[i]), in.f[0]));
        break;
      case augk::kBlendLuma:
        for (std::int64_t i = t; i < total; i += nt)
          cur[i] = augk::blendOf(j.scratch[i], augk::lumaAt(j.scratch, plane, i % plane), in.f[0], in.f[1]);
        break;
      case augk::kBlendMean: {
        if (t == 0) lumaSum = 0;
        __syncthreads();
        unsigned long long mine = 0;
        for (std::int64_t i = t; i < plane; i += nt) mine += static_cast<unsigned long long>(augk::lumaAt(cur, plane, i));
        atomicAdd(&lumaSum, mine);
        __syncthreads();
        const float mean = augk::meanOf(static_cast<std::int64_t>(lumaSum), plane);
        for (std::int64_t i = t; i < total; i += nt) cur[i] = augk::blendOf(cur[i], mean, in.f[0], in.f[1]);
        break;
      }
      case augk::kSharpness:
        if (h > 2 && w > 2)
          for (std::int64_t i = t; i < total; i += nt) {
            const int c = static_cast<int>(i / plane), y = static_cast<int>((i % plane) / w), x = static_cast<int>(i % w);
            if (y > 0 && y < h - 1 && x > 0 && x < w - 1) cur[i] = augk::sharpnessAt(j.scratch + c * plane, w, in.f[0], y, x);
          }
        break;
      case augk::kMask:
        for (std::int64_t i = t; i < total; i += nt) cur[i] = static_cast<std::uint8_t>(cur[i] & in.i0);
        break;
      case augk::kSolarize:
        for (std::int64_t i = t; i < total; i += nt)
          if (static_cast<float>(cur[i]) >= in.f[0]) cur[i] = static_cast<std::uint8_t>(255 - cur[i]);
        break;
      case augk::kAutoContrast:
        if (t < 3) lo[t] = 255, hi[t] = 0;
        __syncthreads();
        for (int c = 0; c < 3; ++c) {  // each thread's own minimum and maximum, then one atomic each
          int mn = 255, mx = 0;
          for (std::int64_t i = c * plane + t; i < (c + 1) * plane; i += nt) {
            mn = min(mn, static_cast<int>(cur[i]));
            mx = max(mx, static_cast<int>(cur[i]));
          }
          atomicMin(&lo[c], mn);
          atomicMax(&hi[c], mx);
        }
        __syncthreads();
        for (std::int64_t i = t; i < total; i += nt) cur[i] = augk::stretchOf(cur[i], lo[i / plane], hi[i / plane]);
        break;
      case augk::kEqualize:
        for (int i = t; i < 3 * 256; i += nt) hist[i / 256][i % 256] = 0;
        __syncthreads();
        for (std::int64_t i = t; i < total; i += nt) atomicAdd(&hist[i / plane][cur[i]], 1u);
        __syncthreads();
        if (t < 3) keep[t] = augk::equalizeTable(hist[t], plane, lut[t]) ? 0 : 1;
        __syncthreads();
        for (std::int64_t i = t; i < total; i += nt)
          if (!keep[i / plane]) cur[i] = lut[i / plane][cur[i]];
        break;
      case augk::kInvert:
        for (std::int64_t i = t; i < total; i += nt) cur[i] = static_cast<std::uint8_t>(255 - cur[i]);
        break;
      case augk::kMixBegin:
        for (std::int64_t i = t; i < total; i += nt) j.mix[i] = augk::mul(in.f[0], static_cast<float>(j.img[i]));
        break;
      case augk::kChainBegin:
        for (std::int64_t i = t; i < total; i += nt) j.chain[i] = j.img[i];
        inChain = true;
        break;
      case augk::kChainEnd:
        for (std::int64_t i = t; i < total; i += nt) j.mix[i] = augk::add(j.mix[i], augk::mul(in.f[0], static_cast<float>(j.chain[i])));
        inChain = false;
        break;
      case augk::kMixEnd:
        for (std::int64_t i = t; i < total; i += nt) j.img[i] = static_cast<std::uint8_t>(augk::clamp255(j.mix[i]));
        break;
      default:
        break;
    }
    __syncthreads();
  }
}

}  // namespace

cudaError_t launchAugment(const AugJob* jobs, int n, int h, int w, const augk::Instr* program, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  augmentKernel<<<n, kAugThreads, 0, stream>>>(jobs, h, w, program);
  return cudaGetLastError();
}

cudaError_t launchCropResample(const CropJob* jobs, int n, int outW, int outH, const std::int32_t* ints,
                               const float* floats, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const dim3 grid(kBlocksPerImage, static_cast<unsigned>(n));
  horizontalPass<<<grid, kThreads, 0, stream>>>(jobs, outW, ints, floats);
  verticalPass<<<grid, kThreads, 0, stream>>>(jobs, outW, outH, ints, floats);
  return cudaGetLastError();
}

}  // namespace exprun::kernels
