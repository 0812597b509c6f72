// Purpose: batch norm -> ReLU -> 2x2 max-pool (stride 2) as one CPU kernel, for models whose
// stages end that way (small_cnn). The same function as libtorch's three modules, computed in one
// pass over the activations each way instead of seven:
//  - forward (training): per channel, the batch mean and variance (two reads of the input, double
//    accumulation as libtorch's), then normalise, pool and rectify in one read, writing only the
//    pooled output and a one-byte argmax per output (libtorch: the normalised tensor, the rectified
//    tensor, the pooled output and an int64 index per output);
//  - backward: the batch-norm backward reduced over the pooled gradient's argmax positions (a
//    quarter of the input), then the input gradient written once (libtorch: zero-fill, scatter,
//    threshold, then batch norm's two passes).
// On this repository's 2-core CPU the fused small_cnn step takes about half the time of the three
// modules' (README, "Time to accuracy"); libtorch's NCHW max-pool alone costs several times a copy
// of its input there.
//
// Semantics kept: the BatchNorm2d's parameters and buffers are used and updated as its forward does
// (running mean, unbiased running variance with its momentum, num_batches_tracked), the pool picks
// the first maximum of a window (NaN wins, as libtorch's), a window whose maximum is not positive
// passes no gradient (as ReLU's threshold backward), trailing odd rows/columns are normalised for
// the statistics but pooled away (floor mode). Results equal the three modules' up to float rounding
// of the statistics (tests/plugins/BnReluPoolTest.cpp: 1e-5).
//
// Anything else runs the three libtorch modules: CUDA tensors, dtypes other than float32 (autocast),
// non-contiguous (channels_last) inputs, a BatchNorm2d without affine parameters, running
// statistics or a fixed momentum, or evaluation mode while gradients are wanted.
#pragma once

#include "runner/TorchPch.h"

namespace exprun {

// max_pool2d(relu(bn(x)), 2); fused where the conditions above hold, else libtorch's modules.
torch::Tensor bnReluPool(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn);

// Whether bnReluPool takes its fused kernel for this input and module in the current grad mode.
bool bnReluPoolFuses(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn);

}  // namespace exprun
