// Purpose: the check of CudaArch.h. A kernel of this library is compiled for the same
// architectures as the others, so whether the runtime finds code for it answers for all of them.
#include "runner/nn/CudaArch.h"

#include <cuda_runtime_api.h>

#include <atomic>

namespace exprun {
namespace {
__global__ void probeKernel() {}
constexpr int kDevices = 64;
std::atomic<int> known[kDevices];  // 0: not asked yet, 1: runs, 2: does not
}  // namespace

bool ownKernelsRunOn(int index) {
  if (index < 0 || index >= kDevices) return false;
  const int k = known[index].load();
  if (k != 0) return k == 1;
  int current = 0;
  bool runs = false;
  if (cudaGetDevice(&current) == cudaSuccess && cudaSetDevice(index) == cudaSuccess) {
    cudaFuncAttributes attributes{};
    runs = cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&probeKernel)) == cudaSuccess;
    cudaSetDevice(current);
  }
  (void)cudaGetLastError();  // a refusal leaves no error behind for the next launch to report
  known[index].store(runs ? 1 : 2);
  return runs;
}

}  // namespace exprun
