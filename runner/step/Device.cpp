// Purpose: backend, device, threads and precision support (see Device.h).
#include "runner/step/Device.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "runner/nn/Autocast.h"
#include "runner/util/Compat.h"
#include "runner/util/Format.h"

namespace exprun {

std::string chooseBackend(const Spec& spec) {
  const std::string& b = spec.distributed.backend;
  if (b != "auto") return b;
  const DeviceChoice dev = spec.train.execution.device;
  return (dev == DeviceChoice::Cuda || (dev == DeviceChoice::Auto && compat::cudaAvailable())) ? "nccl" : "gloo";
}

torch::Device chooseDevice(const Spec& spec, const DistEnv& env) {
  const DeviceChoice want = spec.train.execution.device;
  if (want == DeviceChoice::Cuda && !compat::cudaAvailable())
    throw std::invalid_argument("train.device: 'cuda' requested but no CUDA device is available");
  if (want == DeviceChoice::Cuda || (want == DeviceChoice::Auto && compat::cudaAvailable()))
    // One GPU per local rank; more ranks than GPUs share them round-robin (e.g. Gloo tests on one GPU).
    return torch::Device(torch::kCUDA,
                         static_cast<c10::DeviceIndex>(env.localRank % std::max(1, compat::cudaDeviceCount())));
  return torch::Device(torch::kCPU);
}

int chooseThreads(const Execution& execution, const DistEnv& env) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return execution.threads > 0 ? static_cast<int>(execution.threads) : std::max(1, cores / std::max(1, env.localWorldSize));
}

int processCores(int localWorldSize) {
  const int host = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : host;
  if (mine > 0 && mine < host) return mine;  // pinned by a launcher (taskset, Slurm, numactl)
  return std::max(1, host / std::max(1, localWorldSize));
}

std::string workersWarning(int workers, int cores, const torch::Device& device) {
  if (!device.is_cuda() || workers < cores) return "";
  return strf("train.workers %d: this process has %d core(s), and the training thread, which launches the step's "
              "kernels, needs one of them: the workers will wait for cores and the device for batches "
              "(docs/results.md, the pipeline under training). Use at most %d, or data.decode: gpu",
              workers, cores, std::max(1, cores - 1));
}

void checkPrecisionSupported(Precision precision, const torch::Device& device) {
  auto dtype = autocastDtype(precision);
  if (!dtype) return;
  try {
    torch::NoGradGuard g;
    AutocastGuard ac(device.type(), dtype);
    auto w = torch::randn({2, 1, 3, 3}, torch::TensorOptions().device(device));
    auto y = torch::conv2d(torch::randn({1, 1, 4, 4}, torch::TensorOptions().device(device)), w);
    (void)y;
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("train.precision: ") + precisionName(precision) +
                                " autocast is not supported on " + device.str() + " by this LibTorch (" +
                                std::string(e.what()).substr(0, 120) + ")");
  }
}

}  // namespace exprun
