// Purpose: a guard that restores the default CPU generator's state on leaving, so that building a
// throwaway model (its initialisation draws numbers) or counting its FLOPs on random images leaves
// the run's random sequence as it was.
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <mutex>

namespace exprun {

class KeepRandomState {
 public:
  KeepRandomState() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  ~KeepRandomState() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(state_);
  }
  KeepRandomState(const KeepRandomState&) = delete;
  KeepRandomState& operator=(const KeepRandomState&) = delete;

 private:
  at::Generator gen_;
  at::Tensor state_;
};

}  // namespace exprun
