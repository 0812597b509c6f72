// Purpose: a model's layers as the graph of operations its forward runs in evaluation mode —
// convolutions, batch norms, activations, pooling, flattening, linear layers and residual sums —
// with the modules that hold their weights and their state-dict names. A model that describes
// itself so (Model::graph) can be reshaped and converted by tools that must know which tensors
// feed which: structured channel pruning reads from it which channels must go together
// (runner/compress/Channels.h), int8 quantization runs it with int8 kernels
// (plugins/methods/compress/Quantize.h). run() computes the graph in float, as the model's forward does in
// evaluation mode (the models' tests compare the two). Dropout is left out (identity in evaluation).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace exprun {

struct GraphNode {
  enum class Op { Input, Conv, BatchNorm, Relu, Relu6, MaxPool, AvgPoolFlatten, Flatten, Linear, Add };
  Op op = Op::Input;
  std::vector<int> inputs;  // earlier nodes' indices
  std::string name;         // the module's state-dict prefix (Conv, BatchNorm, Linear), e.g. "layer1.0.conv1"
  torch::nn::Conv2d conv{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::Linear linear{nullptr};
  std::int64_t kernel = 0, stride = 0, padding = 0;  // MaxPool
};

// Module `i` of a Sequential as its own type (throws std::logic_error when it is another).
template <class Impl>
std::shared_ptr<Impl> moduleAt(torch::nn::SequentialImpl& s, std::size_t i) {
  auto p = std::dynamic_pointer_cast<Impl>(s.ptr(i));
  if (!p) throw std::logic_error("model graph: module " + std::to_string(i) + " of a Sequential is not of the expected type");
  return p;
}

class ModelGraph {
 public:
  bool empty() const { return nodes_.empty(); }
  const std::vector<GraphNode>& nodes() const { return nodes_; }
  // The graph's output: the last node added.
  int output() const { return static_cast<int>(nodes_.size()) - 1; }

  // Builders: each adds a node and returns its index.
  int input();
  int conv(std::string name, torch::nn::Conv2d conv, int x);
  int batchNorm(std::string name, torch::nn::BatchNorm2d bn, int x);
  int relu(int x);
  int relu6(int x);
  int maxPool(int x, std::int64_t kernel, std::int64_t stride, std::int64_t padding = 0);
  int avgPoolFlatten(int x);  // adaptive average pool to 1x1, then flatten
  int flatten(int x);
  int linear(std::string name, torch::nn::Linear linear, int x);
  int add(int a, int b);

  // The graph computed in float (batch norm with its running statistics); every node's output when
  // `all` is given (for observers and shape probes).
  torch::Tensor run(const torch::Tensor& x, std::vector<torch::Tensor>* all = nullptr) const;
  // How many nodes read each node's output.
  std::vector<int> readers() const;

 private:
  int push(GraphNode n);
  static GraphNode node(GraphNode::Op op, std::vector<int> inputs, std::string name = {});
  std::vector<GraphNode> nodes_;
};

}  // namespace exprun
