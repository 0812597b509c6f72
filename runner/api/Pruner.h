// Purpose: the `pruner` plugin kind — how structured channel pruning ranks the channels of a group
// (the prune method's `pruner`): each channel's importance from the tensors of the group (the filters that
// produce it, the batch-norm scales on it), and optionally a penalty added to gradients during
// training (network slimming's L1 on batch-norm scales). Which channels go together, the schedule
// and the target are exprun's (plugins/methods/compress/Prune.h); a pruner only scores.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

// The tensors of one channel group, each with the group's channels along dimension 0.
struct GroupTensors {
  std::vector<torch::Tensor> filters;      // weights of the convolutions / linear layers producing the channels
  std::vector<torch::Tensor> normScales;   // batch-norm weights (γ) on the channels
};

class Pruner {
 public:
  virtual ~Pruner() = default;
  // One score per channel (float, CPU); the lowest go first.
  virtual torch::Tensor importance(const GroupTensors& group) const = 0;
  // Called on every optimizer step after the gradients are unscaled and before clipping, with the
  // batch-norm scales of the prunable groups (their .grad defined). Default: nothing.
  virtual void penalize(const std::vector<torch::Tensor>& normScales) const { (void)normScales; }
};

// Σ over filters of each channel's L1 norm (the weights of a filter summed in absolute value), for
// pruners whose group has no batch norm to read.
inline torch::Tensor filterL1(const GroupTensors& group) {
  torch::Tensor score;
  for (const auto& w : group.filters) {
    torch::Tensor l1 = w.detach().to(torch::kCPU, torch::kFloat).abs().flatten(1).sum(1);
    score = score.defined() ? score + l1 : l1;
  }
  return score;
}

}  // namespace exprun
