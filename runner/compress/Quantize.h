// Purpose: post-training static int8 quantization of a model that describes its layers
// (runner/api/ModelGraph.h), run on LibTorch's int8 CPU kernels — the quantized:: operators that
// PyTorch's quantized models call (x86 engine: fbgemm with oneDNN), not float with rounding.
// As PyTorch's eager-mode recipe does it: batch norms folded into the convolutions before them;
// convolution (+ ReLU / ReLU6), linear (+ ReLU) and residual sum (+ ReLU) fused; weights int8
// per output channel, symmetric; activations uint8 per tensor, affine, their ranges observed (min /
// max) in float over calibration batches; 7-bit activations (reduce_range) on CPUs without VNNI,
// whose int8 dot products could otherwise saturate. Max-pooling, average pooling and flattening
// run on the int8 tensors; logits come back as float.
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
  bool reduceRange = false;  // 7-bit activations (see above)
};

// Whether this CPU has int8 dot products without saturation risk (VNNI or AMX-INT8).
bool cpuHasVnni();

class Int8Model {
 public:
  // Quantizes `model` (float, on the CPU, left unchanged): its graph, its activations' ranges
  // observed over the batches `next` yields (until it yields nothing). Throws std::invalid_argument
  // naming a layer exprun cannot quantize (a model without a graph, a batch norm after no convolution).
  Int8Model(Model& model, const std::function<std::optional<torch::Tensor>()>& next, Int8Options options);
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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace exprun
