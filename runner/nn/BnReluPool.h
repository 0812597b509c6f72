// Purpose: batch norm -> ReLU -> 2x2 max-pool (stride 2) as one CPU kernel, for models whose
// stages end that way (small_cnn). The same function as libtorch's three modules, writing far less:
//  - forward (training): per channel, the batch mean and variance (double accumulation, as
//    libtorch's), then normalise, pool and rectify in one read, writing only the pooled output and
//    a one-byte argmax per output (libtorch: the normalised tensor, the rectified tensor, the
//    pooled output and an int64 index per output);
//  - backward: the batch-norm backward's sums over the pooled gradient's argmax positions (a
//    quarter of the input), then the input gradient written once (libtorch: zero-fill, scatter,
//    threshold, then batch norm's two passes).
// Both layouts: NCHW (four pooling windows of a plane per vector) and channels_last (four channels
// of a window per vector). On this repository's 2-core CPU libtorch's NCHW max-pool alone costs
// several times a copy of its input; the fused small_cnn trains 1.5x as fast (README, "Time to
// accuracy").
//
// Semantics kept: the BatchNorm2d's parameters and buffers are used and updated as its forward does
// (running mean, unbiased running variance, its momentum or the cumulative average,
// num_batches_tracked), the pool picks the first maximum of a window (a NaN wins, as libtorch's),
// a window whose maximum is not positive passes no gradient (as ReLU's threshold backward; a NaN
// maximum passes it), trailing odd rows/columns count in the statistics but are pooled away (floor
// mode). Results equal the three modules' up to float rounding of the statistics
// (tests/plugins/BnReluPoolTest.cpp). Per-channel reductions run in a fixed order: results do not
// depend on the number of threads. No double backward (refused with an error).
//
// Anything else runs the three libtorch modules: CUDA tensors, dtypes other than float32 (autocast),
// inputs contiguous in neither layout, a BatchNorm2d without affine parameters or running
// statistics, or evaluation mode while gradients are wanted.
#pragma once

#include "runner/util/TorchPch.h"

namespace exprun {

// max_pool2d(relu(bn(x)), 2); fused where the conditions above hold, else libtorch's modules.
torch::Tensor bnReluPool(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn);

// Whether bnReluPool takes its fused kernel for this input and module in the current grad mode.
bool bnReluPoolFuses(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn);

}  // namespace exprun
