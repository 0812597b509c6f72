// Purpose: building and computing a model's graph (see ModelGraph.h).
#include "runner/api/ModelGraph.h"

#include <stdexcept>

namespace exprun {

int ModelGraph::push(GraphNode n) {
  for (int i : n.inputs)
    if (i < 0 || i >= static_cast<int>(nodes_.size()))
      throw std::logic_error("model graph: node input " + std::to_string(i) + " does not exist yet");
  nodes_.push_back(std::move(n));
  return output();
}

GraphNode ModelGraph::node(GraphNode::Op op, std::vector<int> inputs, std::string name) {
  GraphNode n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.name = std::move(name);
  return n;
}

int ModelGraph::input() { return push(node(GraphNode::Op::Input, {})); }
int ModelGraph::relu(int x) { return push(node(GraphNode::Op::Relu, {x})); }
int ModelGraph::relu6(int x) { return push(node(GraphNode::Op::Relu6, {x})); }
int ModelGraph::avgPoolFlatten(int x) { return push(node(GraphNode::Op::AvgPoolFlatten, {x})); }
int ModelGraph::flatten(int x) { return push(node(GraphNode::Op::Flatten, {x})); }
int ModelGraph::add(int a, int b) { return push(node(GraphNode::Op::Add, {a, b})); }

int ModelGraph::conv(std::string name, torch::nn::Conv2d c, int x) {
  GraphNode n = node(GraphNode::Op::Conv, {x}, std::move(name));
  n.conv = std::move(c);
  return push(std::move(n));
}

int ModelGraph::batchNorm(std::string name, torch::nn::BatchNorm2d bn, int x) {
  GraphNode n = node(GraphNode::Op::BatchNorm, {x}, std::move(name));
  n.bn = std::move(bn);
  return push(std::move(n));
}

int ModelGraph::linear(std::string name, torch::nn::Linear l, int x) {
  GraphNode n = node(GraphNode::Op::Linear, {x}, std::move(name));
  n.linear = std::move(l);
  return push(std::move(n));
}

int ModelGraph::maxPool(int x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
  GraphNode n = node(GraphNode::Op::MaxPool, {x});
  n.kernel = kernel;
  n.stride = stride;
  n.padding = padding;
  return push(std::move(n));
}

std::vector<int> ModelGraph::readers() const {
  std::vector<int> r(nodes_.size(), 0);
  for (const auto& n : nodes_)
    for (int i : n.inputs) ++r[static_cast<std::size_t>(i)];
  return r;
}

torch::Tensor ModelGraph::run(const torch::Tensor& x, std::vector<torch::Tensor>* all) const {
  using Op = GraphNode::Op;
  std::vector<torch::Tensor> v(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const GraphNode& n = nodes_[i];
    const auto in = [&](std::size_t k) { return v[static_cast<std::size_t>(n.inputs[k])]; };
    switch (n.op) {
      case Op::Input: v[i] = x; break;
      case Op::Conv: v[i] = n.conv.ptr()->forward(in(0)); break;
      case Op::BatchNorm:
        v[i] = torch::batch_norm(in(0), n.bn->weight, n.bn->bias, n.bn->running_mean, n.bn->running_var,
                                 /*training=*/false, 0.0, n.bn->options.eps(), /*cudnn_enabled=*/true);
        break;
      case Op::Relu: v[i] = torch::relu(in(0)); break;
      case Op::Relu6: v[i] = torch::clamp(in(0), 0.0, 6.0); break;
      case Op::MaxPool: v[i] = torch::max_pool2d(in(0), n.kernel, n.stride, n.padding); break;
      case Op::AvgPoolFlatten: v[i] = torch::adaptive_avg_pool2d(in(0), {1, 1}).flatten(1); break;
      case Op::Flatten: v[i] = in(0).flatten(1); break;
      case Op::Linear: v[i] = n.linear.ptr()->forward(in(0)); break;
      case Op::Add: v[i] = in(0) + in(1); break;
    }
  }
  torch::Tensor out = v.back();
  if (all) *all = std::move(v);
  return out;
}

}  // namespace exprun
