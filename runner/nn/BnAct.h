// Purpose: batch norm fused with what follows it in ResNet and MobileNetV2: act(bn(x) + z), with
// act none, ReLU or ReLU6 and z an optional residual. On CUDA with channels_last activations the
// whole thing is three kernels forward (statistics, statistics merge + running-statistics update,
// one normalise + add + activation pass) and three backward (the two per-channel sums, their
// merge, one pass writing the input's and the residual's gradients), against ATen's batch norm,
// add and ReLU as separate kernels that each read and write the activation (runner/nn/BnActKernels.cu).
//
// Semantics: BatchNorm2d's training forward (batch statistics, the running mean and unbiased running
// variance updated with its momentum, num_batches_tracked counted) and evaluation forward (running
// statistics); fp32 statistics, parameters and accumulation for bf16, fp16 and fp32 activations;
// the output in the input's dtype, rounded once (ATen rounds after the norm and again after the
// add). Synchronized batch norm: given a process group, the statistics and the backward sums are
// summed over the ranks as SyncBatchNorm2d does (runner/nn/SyncBatchNorm.h). The ReLU/ReLU6 masks
// come from the saved output, as ATen's backward of an in-place relu; no double backward.
//
// fusedBnAct also runs on CPU tensors, with ATen ops in place of the kernels (the same formulas, the
// same saved tensors): the tests check the autograd wiring and the arithmetic there, and the
// kernels against it on a card. The models take the kernels only where bnActFusable says so.
#pragma once

#include "runner/util/TorchPch.h"

namespace exprun {

class Dist;
struct SyncCost;

enum class BnActivation { None, Relu, Relu6 };

// Whether the CUDA kernels can compute act(bn(x) + z) for these tensors and this module in the
// current mode: a build with the kernels, x a 4-d bf16/fp16/fp32 CUDA tensor contiguous in
// channels_last with more than one value per channel, z undefined or like x, bn affine with running
// statistics and a momentum, fp32 parameters and buffers on x's device; training, or evaluation
// without gradients.
bool bnActFusable(const torch::Tensor& x, const torch::Tensor& z, const torch::nn::BatchNorm2dImpl& bn);

// The per-channel arithmetic's type for activations like x: float64 for float64, else float32
// (batch norm's, fused or not, synchronized or not).
torch::ScalarType normMathType(const torch::Tensor& x);

// Whether this build has the CUDA kernels.
bool bnActKernelsBuilt();

// act(bn(x) + z) as described above: the kernels on CUDA tensors, ATen ops on CPU ones. z may be
// undefined. With `dist` (training only) the statistics and backward sums are global, the cost of
// the allreduces added to `cost` (may be null). The caller checks the conditions (bnActFusable on CUDA).
torch::Tensor fusedBnAct(const torch::Tensor& x, const torch::Tensor& z, torch::nn::BatchNorm2dImpl& bn,
                         BnActivation act, Dist* dist = nullptr, SyncCost* cost = nullptr);

}  // namespace exprun
