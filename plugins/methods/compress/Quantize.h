// Purpose: post-training static int8 quantization of a model that describes its layers
// (runner/api/ModelGraph.h), run on LibTorch's int8 CPU kernels — the quantized:: operators that
// PyTorch's quantized models call (x86 engine: fbgemm with oneDNN), not float with rounding — and
// quantization-aware fine-tuning (FakeQuantForward): the same plan run in float with the int8
// model's rounding simulated, so that the last epochs of training adapt the weights to it.
// Rule: the int8 model is built on the grids the fine-tuning trained with, so both round alike.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runner/api/Model.h"

namespace exprun {

struct Int8Options {
  // 7-bit activations: on CPUs without VNNI, whose int8 dot products could otherwise saturate (on
  // every CPU the inputs of depthwise convolutions get them, whose x86 kernel saturates anyway).
  bool reduceRange = false;
};

// An activation's uint8 grid: value = scale · (q − zero_point), q in 0…255 (0…127 with reduce_range).
struct ActivationGrid {
  double scale = 1;
  std::int64_t zeroPoint = 0;
};

// Whether this CPU has int8 dot products without saturation risk (VNNI or AMX-INT8).
bool cpuHasVnni();

// As PyTorch's eager-mode recipe does it: batch norms folded into the convolutions before them;
// convolution (+ ReLU / ReLU6), linear (+ ReLU) and residual sum (+ ReLU) fused; weights int8 per
// output channel, symmetric; activations uint8 per tensor, affine, their ranges observed (min / max)
// in float over calibration batches. Max-pooling, average pooling and flattening run on the int8
// tensors; logits come back as float.
class Int8Model {
 public:
  // Quantizes `model` (float, on the CPU, left unchanged): its graph, its activations' ranges
  // observed over the batches `next` yields (until it yields nothing). Throws std::invalid_argument
  // naming a layer exprun cannot quantize (a model without a graph, a batch norm after no convolution).
  Int8Model(Model& model, const std::function<std::optional<torch::Tensor>()>& next, Int8Options options);
  // The same on given activation grids (a quantization-aware fine-tuning's, in grids()' order);
  // throws std::invalid_argument when their number is not the model's.
  Int8Model(Model& model, const std::vector<ActivationGrid>& grids);
  ~Int8Model();
  Int8Model(Int8Model&&) noexcept;
  // Float images in, float logits out (int8 inside).
  torch::Tensor forward(const torch::Tensor& x) const;
  // The int8 weights, their per-channel scales and zero points, the float biases, and every
  // activation's scale and zero point, named after the model's layers (for safetensors).
  std::vector<std::pair<std::string, torch::Tensor>> tensors() const;
  // Their bytes.
  std::int64_t bytes() const;
  const std::string& engine() const;
  // The activation grids, one per op that sets one (the input, convolutions, linear layers but the
  // logits', residual sums, ReLU6), in the graph's order.
  std::vector<ActivationGrid> grids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The int8 model's computation in float, differentiable, on the model's own parameters (updated by
// training): batch norms folded into the convolutions before them with their running statistics
// (frozen: the batch norms' statistics stay fixed, their scales and shifts still learn), weights
// rounded per output channel to int8 (their current range), every activation that the int8 model
// quantizes rounded and clipped to its grid (at::fake_quantize_per_channel_affine /
// _per_tensor_affine, whose gradients pass straight through inside the grid's range). Runs without
// autocast, in float32.
class FakeQuantForward {
 public:
  // `grids`: the int8 model's (Int8Model::grids(), calibrated) or a checkpoint's. Throws
  // std::invalid_argument as Int8Model does.
  FakeQuantForward(Model& model, const std::vector<ActivationGrid>& grids);
  ~FakeQuantForward();
  torch::Tensor operator()(const torch::Tensor& x) const;
  std::vector<ActivationGrid> grids() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace exprun
