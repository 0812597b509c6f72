// Purpose: the emulated copies of exprun's own kernels (tests/CMakeLists.txt builds them with
// tests/cudaemu/translate.py): the same functions as runner/nn/BnActKernels.h and
// runner/data/GpuJpegKernels.h, in a namespace emu inside theirs, run on the CPU (CudaEmu.h).
// Their declarations must match the headers' (bnact::Kernels' member types check the batch norm's).
#pragma once

#include "runner/data/GpuJpegKernels.h"
#include "runner/nn/BnActKernels.h"

namespace exprun::bnact::emu {
std::int64_t scratchFloats(const Shape& s);
cudaError_t stats(Dtype t, const void* x, const Shape& s, float* scratch, float* mean, float* var, float* invstd,
                  double eps, double momentum, float* runningMean, float* runningVar, cudaStream_t stream);
cudaError_t finalize(int channels, const float* mean, const float* var, double count, float* invstd, double eps,
                     double momentum, float* runningMean, float* runningVar, cudaStream_t stream);
cudaError_t apply(Dtype t, const void* x, const void* z, void* y, const Shape& s, const float* mean,
                  const float* invstd, const float* weight, const float* bias, Act act, cudaStream_t stream);
cudaError_t backwardSums(Dtype t, const void* dy, const void* y, const void* x, const Shape& s, const float* mean,
                         const float* invstd, Act act, float* scratch, float* sumDy, float* sumDyXhat,
                         cudaStream_t stream);
cudaError_t backwardApply(Dtype t, const void* dy, const void* y, const void* x, void* dx, void* dz, const Shape& s,
                          const float* mean, const float* invstd, const float* weight, const float* sumDy,
                          const float* sumDyXhat, double count, Act act, cudaStream_t stream);

// The table runner/nn/BnAct.cpp calls through, with grids sized for `sms` multiprocessors.
inline Kernels table(int sms) { return Kernels{&scratchFloats, &stats, &finalize, &apply, &backwardSums, &backwardApply, sms}; }
}  // namespace exprun::bnact::emu

namespace exprun::kernels::emu {
cudaError_t launchAugment(const AugJob* jobs, int n, int h, int w, const augk::Instr* program, cudaStream_t stream);
cudaError_t launchCropResample(const CropJob* jobs, int n, int outW, int outH, const std::int32_t* ints,
                               const float* floats, cudaStream_t stream);
}  // namespace exprun::kernels::emu
