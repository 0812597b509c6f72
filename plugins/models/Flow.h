// Purpose: a model's layers written once for both of their uses. A block's computation is a
// template over a flow, `template <class F> typename F::Value flow(F& f, const std::string& name,
// typename F::Value x)`: RunFlow computes it on tensors with the modules' own forwards (the
// model's forward, the fused batch norm included), GraphFlow records it as ModelGraph nodes with
// the modules' state-dict names (Model::graph(): channel pruning and int8 read it). So the forward
// and the graph cannot drift apart; the models' tests still compare the graph's output with the
// forward's.
#pragma once

#include <string>

#include "runner/api/ModelGraph.h"
#include "runner/nn/SyncBatchNorm.h"

namespace exprun {

// Computes the layers: the modules' forwards.
struct RunFlow {
  using Value = torch::Tensor;
  static Value none() { return {}; }
  Value conv(const std::string&, const char*, torch::nn::Conv2d& module, const Value& x) { return module(x); }
  // act(bn(x) + z), z absent (none()) or the residual branch's input, in one call (fused when the
  // batch norm was asked to fuse: SyncBatchNorm2dImpl::forwardAct).
  Value bnAct(const std::string&, const char*, SyncBatchNorm2d& bn, const Value& x, const Value& z, BnActivation act) {
    return bn->forwardAct(x, z, act);
  }
  // A Sequential of a convolution, a batch norm and optionally a ReLU6: its own forward.
  template <class Sequential>
  Value sequence(const std::string&, const char*, Sequential& s, const Value& x) {
    return s->forward(x);
  }
  Value maxPool(const Value& x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
    return torch::max_pool2d(x, kernel, stride, padding);
  }
  Value avgPoolFlatten(const Value& x) { return torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1); }
  Value linear(const std::string&, const char*, torch::nn::Linear& module, const Value& x) { return module(x); }
};

// Records the layers as graph nodes named "<block>.<name>" (or "<name>" when block is empty).
struct GraphFlow {
  using Value = int;
  explicit GraphFlow(ModelGraph& graph) : g(graph) {}
  static Value none() { return -1; }
  Value conv(const std::string& block, const char* name, torch::nn::Conv2d& module, Value x) {
    return g.conv(join(block, name), module, x);
  }
  // batch norm, then the residual add (bn's output first), then the activation.
  Value bnAct(const std::string& block, const char* name, SyncBatchNorm2d& bn, Value x, Value z, BnActivation act) {
    Value y = g.batchNorm(join(block, name), asBatchNorm2d(bn), x);
    if (z != none()) y = g.add(y, z);
    return activation(y, act);
  }
  // Conv (index 0), batch norm (1), ReLU6 when there is a third module.
  template <class Sequential>
  Value sequence(const std::string& block, const char* name, Sequential& s, Value x) {
    const std::string prefix = join(block, name);
    x = g.conv(prefix + ".0", torch::nn::Conv2d(moduleAt<torch::nn::Conv2dImpl>(*s, 0)), x);
    x = g.batchNorm(prefix + ".1", torch::nn::BatchNorm2d(moduleAt<torch::nn::BatchNorm2dImpl>(*s, 1)), x);
    if (s->size() < 3) return x;
    (void)moduleAt<torch::nn::ReLU6Impl>(*s, 2);  // throws for anything else
    return g.relu6(x);
  }
  Value maxPool(Value x, std::int64_t kernel, std::int64_t stride, std::int64_t padding) {
    return g.maxPool(x, kernel, stride, padding);
  }
  Value avgPoolFlatten(Value x) { return g.avgPoolFlatten(x); }
  Value linear(const std::string& block, const char* name, torch::nn::Linear& module, Value x) {
    return g.linear(join(block, name), module, x);
  }

  ModelGraph& g;

 private:
  static std::string join(const std::string& block, const char* name) {
    return block.empty() ? std::string(name) : block + "." + name;
  }
  Value activation(Value y, BnActivation act) {
    switch (act) {
      case BnActivation::Relu: return g.relu(y);
      case BnActivation::Relu6: return g.relu6(y);
      case BnActivation::None: break;
    }
    return y;
  }
};

}  // namespace exprun
