// Purpose: batch norm -> ReLU -> 2x2 max-pool (stride 2) as one CPU kernel, for models whose stages
// end that way (small_cnn): libtorch's three modules as one function that writes far less — the
// forward only the pooled output and a one-byte argmax per output, the backward the input gradient
// once (its batch-norm sums taken over the argmax positions only). NCHW and channels_last layouts.
// Rule: results equal the three modules' up to float rounding of the statistics
// (tests/plugins/BnReluPoolTest.cpp) and do not depend on the number of threads (per-channel
// reductions run in a fixed order).
#pragma once

#include "runner/util/TorchPch.h"

namespace exprun {

// max_pool2d(relu(bn(x)), 2). The BatchNorm2d's parameters and buffers are used and updated as its
// forward does (running mean, unbiased running variance, its momentum or the cumulative average,
// num_batches_tracked); the pool picks the first maximum of a window (a NaN wins, as libtorch's); a
// window whose maximum is not positive passes no gradient (a NaN maximum passes it); trailing odd
// rows/columns count in the statistics but are pooled away (floor mode). No double backward.
// Fused only for float32 CPU tensors contiguous in NCHW or channels_last, with a BatchNorm2d that
// has affine parameters and running statistics, and not in evaluation mode while gradients are
// wanted; anything else (CUDA, autocast dtypes, other layouts) runs libtorch's three modules.
torch::Tensor bnReluPool(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn);

// Whether bnReluPool takes its fused kernel for this input and module in the current grad mode.
bool bnReluPoolFuses(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn);

}  // namespace exprun
