// Purpose: ProcessGroupNCCL creation. Compiled only when LibTorch has CUDA and nccl.h is found
// (EXPRUN_WITH_NCCL); used only when the spec asks for nccl and a GPU is present.
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "runner/dist/Dist.h"

namespace exprun {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int world,
                                                  double timeoutS, int localRank) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(localRank));
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeoutS * 1000.0));
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, opts);
}

}  // namespace exprun
