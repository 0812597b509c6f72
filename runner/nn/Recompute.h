// Purpose: activation recomputation (what the spec calls `activation_checkpointing`, the user's
// word; inside exprun "checkpoint" means saved training state only). recompute(fn, x) runs fn
// without keeping its intermediate activations and recomputes them in backward, through a custom
// autograd Function that saves only x, restores the CPU RNG state and the autocast state for the
// recomputation, and runs a nested backward through the recomputed segment (so parameter gradients, and the comm
// hooks on them, fire as usual). A constant anchor tensor that requires grad keeps the node in the
// graph when x itself does not (the first stage's input). On CUDA the recomputation does not
// replay the CUDA RNG: keep dropout out of recomputed stages there.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace exprun {

using StageFn = std::function<torch::Tensor(torch::Tensor)>;

// `fn` must stay alive until backward has run.
torch::Tensor recompute(const StageFn* fn, const torch::Tensor& x);

}  // namespace exprun
