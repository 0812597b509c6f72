// Purpose: the crop's resampling on the card (GpuJpegKernels.h).
#include "runner/data/GpuJpegKernels.h"
#include "runner/data/ResampleKernel.h"

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

}  // namespace

cudaError_t launchCropResample(const CropJob* jobs, int n, int outW, int outH, const std::int32_t* ints,
                               const float* floats, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const dim3 grid(kBlocksPerImage, static_cast<unsigned>(n));
  horizontalPass<<<grid, kThreads, 0, stream>>>(jobs, outW, ints, floats);
  verticalPass<<<grid, kThreads, 0, stream>>>(jobs, outW, outH, ints, floats);
  return cudaGetLastError();
}

}  // namespace exprun::kernels
