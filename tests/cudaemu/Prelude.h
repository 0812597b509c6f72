// Purpose: what a .cu file rewritten by tests/cudaemu/translate.py sees first: CUDA's headers for
// the types (dim3, float4, __half, __nv_bfloat16 and their host conversions), then CUDA's keywords
// and built-ins mapped onto the emulator (tests/cudaemu/CudaEmu.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <vector_types.h>

#include <algorithm>
#include <cmath>

#include "tests/cudaemu/CudaEmu.h"

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

#define threadIdx (::cudaemu::threadIndex())
#define blockIdx (::cudaemu::blockIndex())
#define blockDim (::cudaemu::blockDimension())
#define gridDim (::cudaemu::gridDimension())
#define __syncthreads() ::cudaemu::syncthreads(__FILE__, __LINE__)
#define __shfl_down_sync ::cudaemu::shflDown
#define __shfl_up_sync ::cudaemu::shflUp
#define __shfl_xor_sync ::cudaemu::shflXor
#define __shfl_sync ::cudaemu::shfl
#define atomicAdd ::cudaemu::atomicAdd
#define atomicMin ::cudaemu::atomicMin
#define atomicMax ::cudaemu::atomicMax
#define cudaGetLastError ::cudaemu::getLastError

using std::max;
using std::min;
