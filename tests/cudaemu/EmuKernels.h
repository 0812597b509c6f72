// Purpose: the emulated copies of exprun's own kernels (tests/CMakeLists.txt builds them with
// tests/cudaemu/translate.py): the same functions as runner/nn/BnActKernels.h and
// plugins/data/image/GpuJpegKernels.h, in a namespace emu inside theirs, run on the CPU (CudaEmu.h).
// The batch norm's come as a bnact::Kernels table; the JPEG path's two are declared here as in their
// header (a mismatch fails to link).
#pragma once

#include "plugins/data/image/GpuJpegKernels.h"
#include "runner/nn/BnActKernels.h"

namespace exprun::bnact::emu {
// The emulated copy's entry points as the table runner/nn/BnAct.cpp calls through, with grids sized
// for `sms` multiprocessors where no device says it (tests/cudaemu/BnActTable.inc).
Kernels table(int sms);
}  // namespace exprun::bnact::emu

namespace exprun::kernels::emu {
cudaError_t launchAugment(const AugJob* jobs, int n, int h, int w, const augk::Instr* program, cudaStream_t stream);
cudaError_t launchCropResample(const CropJob* jobs, int n, int outW, int outH, const std::int32_t* ints,
                               const float* floats, cudaStream_t stream);
}  // namespace exprun::kernels::emu
