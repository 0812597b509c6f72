// Purpose: how gradients are averaged across ranks — the `comm` plugin kind. The trainer calls
// attach() once (after rank 0's weights are broadcast), runs backward() (a strategy may start
// reducing during it, from gradient-accumulator hooks), then finish() before the optimizer step.
// setSync(false) is the no_sync switch: backward passes accumulate locally, nothing is reduced.
#pragma once

#include <functional>
#include <memory>

#include "runner/dist/Dist.h"
#include "runner/registry/Plugins.h"

namespace exprun {

class CommStrategy {
 public:
  virtual ~CommStrategy() = default;
  virtual void attach(Model& model, Dist& dist) = 0;
  // no_sync when false: the next backward passes are not reduced.
  void setSync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // Completes the reduction of this step's gradients (averaged over ranks, written back into
  // .grad). Returns the seconds spent blocked waiting on communication.
  virtual double finish() = 0;
  // True when .grad tensors are views into the strategy's buffers: the trainer then zeroes
  // gradients in place (zero_grad(set_to_none=false)) instead of dropping them.
  virtual bool keepsGradStorage() const { return false; }

 protected:
  bool sync_ = true;
};

using CommFactory = std::function<std::unique_ptr<CommStrategy>(const Options&)>;
Registry<CommFactory>& commRegistry();

}  // namespace exprun
