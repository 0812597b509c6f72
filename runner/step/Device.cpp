// Purpose: backend, device, threads and precision support (see Device.h).
#include "runner/step/Device.h"

#include <thread>

#include "runner/nn/Autocast.h"
#include "runner/util/Compat.h"

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
