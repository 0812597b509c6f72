// Purpose: batch norm fused with what follows it in ResNet and MobileNetV2: act(bn(x) + z), with act
// none, ReLU or ReLU6 and z an optional residual. On CUDA with channels_last activations it is three
// kernels forward and three backward (runner/nn/BnActKernels.cu), where ATen runs batch norm, add
// and ReLU as separate kernels that each read and write the activation.
// Rule: BatchNorm2d's semantics, fp32 statistics and accumulation; the CPU path (ATen ops, the same
// formulas and saved tensors) is what the tests check the kernels against. The models take the
// kernels only where bnActFusable says so.
#pragma once

#include "runner/util/TorchPch.h"

namespace exprun {

class Dist;
struct SyncCost;
namespace bnact {
struct Kernels;  // runner/nn/BnActKernels.h: a table of the kernels' entry points
}

enum class BnActivation { None, Relu, Relu6 };

// Whether the CUDA kernels can compute act(bn(x) + z) for these tensors and this module in the
// current mode: a build with the kernels, x a 4-d bf16/fp16/fp32 CUDA tensor contiguous in
// channels_last with more than one value per channel, z undefined or like x, bn affine with running
// statistics and a momentum, fp32 parameters and buffers on x's device; training, or evaluation
// without gradients.
// `host`: a kernel table CPU tensors run through instead of ATen's ops (the CUDA emulator's in
// tests/cudaemu; null: ATen's); CUDA tensors always run the device's kernels.
bool bnActFusable(const torch::Tensor& x, const torch::Tensor& z, const torch::nn::BatchNorm2dImpl& bn,
                  const bnact::Kernels* host = nullptr);

// The per-channel arithmetic's type for activations like x: float64 for float64, else float32
// (batch norm's, fused or not, synchronized or not).
torch::ScalarType normMathType(const torch::Tensor& x);

// Whether this build has the CUDA kernels.
bool bnActKernelsBuilt();

// act(bn(x) + z): the kernels on CUDA tensors, ATen ops on CPU ones. z may be undefined.
// BatchNorm2d's training forward (batch statistics, the running mean and unbiased running variance
// updated with its momentum, num_batches_tracked counted) and evaluation forward (running
// statistics); fp32 statistics, parameters and accumulation for bf16, fp16 and fp32 activations; the
// output in the input's dtype, rounded once (ATen rounds after the norm and again after the add).
// The ReLU/ReLU6 masks come from the saved output, as ATen's backward of an in-place relu; no
// double backward. With `dist` (training only) the statistics and backward sums are summed over the
// ranks as SyncBatchNorm2d does (runner/nn/SyncBatchNorm.h), the cost of the allreduces added to
// `cost` (may be null). The caller checks the conditions (bnActFusable on CUDA).
torch::Tensor fusedBnAct(const torch::Tensor& x, const torch::Tensor& z, torch::nn::BatchNorm2dImpl& bn,
                         BnActivation act, Dist* dist = nullptr, SyncCost* cost = nullptr,
                         const bnact::Kernels* host = nullptr);

}  // namespace exprun
