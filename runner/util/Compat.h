// Purpose: the only place with LibTorch-version-specific calls. Moving to a newer LibTorch should
// mean editing this file alone. Reference build: PyTorch 2.11.0's libtorch (pip wheel).
#pragma once

#include <torch/torch.h>
#include <torch/version.h>

#include <string>

namespace exprun::compat {

inline std::string torchVersion() { return TORCH_VERSION; }

// Zeroes every gradient in place, keeping its storage (for gradients that are views into
// communication buckets). LibTorch's zero_grad(false) calls detach_(), which views refuse.
inline void zeroGradKeepStorage(torch::optim::Optimizer& opt) {
  torch::NoGradGuard g;
  for (auto& group : opt.param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) p.mutable_grad().zero_();
}

inline bool cudaAvailable() { return torch::cuda::is_available(); }
inline int cudaDeviceCount() { return static_cast<int>(torch::cuda::device_count()); }

inline void setThreads(int n) {
  torch::set_num_threads(n);
}

}  // namespace exprun::compat
