// Purpose: the CUDA kernels of the GPU JPEG path (plugins/data/image/GpuJpeg.h): the crop's resampling of
// each decoded image into its batch row, with the arithmetic of plugins/data/image/ResampleKernel.h, and
// the augmentation policy's program on it (plugins/data/image/AugmentKernel.h). Plain
// CUDA (plugins/data/image/GpuJpegKernels.cu), no LibTorch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "plugins/data/image/AugmentKernel.h"

namespace exprun::kernels {

// One image's resampling: its decoded rows, its scratch and output, and its tables (offsets into
// the batch's int32 and float arrays).
struct CropJob {
  const std::uint8_t* src;  // decoded RGB interleaved, `pitch` bytes a row: the region whose first
  std::int64_t pitch;       // pixel is the image's (x0, y0)
  std::int32_t x0, y0;
  float* tmp;               // rows x outW x 3: the horizontal pass
  std::uint8_t* dst;        // 3 x outH x outW planes (the batch row)
  std::int32_t lo, rows;    // the image rows [lo, lo + rows) the vertical pass reads
  std::int32_t xFirst, xCount, yFirst, yCount;  // offsets into `ints` (outW, outW, outH, outH entries)
  std::int32_t xW, yW;                          // offsets into `floats` (outW * xTaps, outH * yTaps)
  std::int32_t xTaps, yTaps, flip;
};

// One image's augmentation program (plugins/data/image/AugmentKernel.h), in place on its batch row.
struct AugJob {
  std::uint8_t* img;      // 3 x h x w planes (the batch row)
  std::uint8_t* scratch;  // 3 x h x w: the source of the out-of-place instructions
  std::uint8_t* chain;    // 3 x h x w: AugMix's chain image (null without AugMix)
  float* mix;             // 3 x h x w: AugMix's mixture (null without AugMix)
  std::int32_t first, count;  // the program's instructions in the batch's array
};

// The programs of `n` jobs (jobs and instructions in device memory) on `stream`, a block per
// image; the launch's error.
cudaError_t launchAugment(const AugJob* jobs, int n, int h, int w, const augk::Instr* program, cudaStream_t stream);

// Both passes for `n` jobs (`jobs`, `ints` and `floats` in device memory) on `stream`; the
// launch's error.
cudaError_t launchCropResample(const CropJob* jobs, int n, int outW, int outH, const std::int32_t* ints,
                               const float* floats, cudaStream_t stream);

}  // namespace exprun::kernels
