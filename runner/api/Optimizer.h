// Purpose: the `optimizer` plugin kind — an Optimizer: a torch::optim::Optimizer and what the core
// asks of it beyond LibTorch's interface (the schedule's momentum, its state moved next to the
// parameters after a checkpoint is loaded), so that no core file needs to know the optimizer's
// type; and what optimizers share: the learning-rate options every optimizer has (lr for
// base_batch samples, base_batch, scale_lr) and the parameter groups with and without weight decay
// (biases and normalisation weights exempt).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // LibTorch's optimizer: step, zero_grad, param_groups, save and load.
  virtual torch::optim::Optimizer& torchOptimizer() = 0;
  // The momentum of every parameter group, for schedules that cycle it (SGD's momentum, Adam's
  // beta1); an optimizer without momentum ignores it.
  virtual void setMomentum(double momentum) = 0;
  // Moves every parameter's state (momentum buffers, moments) to the parameter's device: LibTorch
  // loads a saved state on the CPU.
  virtual void stateToParameters() = 0;
  // A fresh state of the kind step() makes for a parameter (a sharded checkpoint's pieces are read
  // into it: runner/checkpoint/Entries.cpp).
  virtual std::unique_ptr<torch::optim::OptimizerParamState> emptyState() const = 0;
  // Bytes of the state's tensors (moments, momentum buffers) this process holds.
  virtual std::int64_t stateBytes() = 0;
  // Sets the learning rate of every parameter group.
  void setLearningRate(double lr);
  double learningRate();
};

// A LibTorch optimizer whose step can skip itself on the device when a flag tensor says that the
// gradients are not finite: fp16 loss scaling then needs no host read of the flag each step, as
// torch.optim's fused optimizers take GradScaler's found_inf.
class SkipsOnDevice {
 public:
  virtual ~SkipsOnDevice() = default;
  // Whether the next step() can honour the flag (every parameter group on a kernel that reads it).
  virtual bool canSkipOnDevice() const = 0;
  // The flag the following step() reads (a float tensor of one element, 1: skip); undefined: none.
  virtual void skipWhen(torch::Tensor foundInf) = 0;
};

// A LibTorch optimizer whose step can be captured in a CUDA graph and replayed (train.cuda_graph,
// runner/step/StepGraph.h): its kernels take every value that changes from step to step from the
// device — the learning rate from a tensor the caller fills, the step counts from the device — and
// it never reads the device from the host. The other hyperparameters (momentum, betas, weight
// decay) are fixed in the graph; the caller captures again when they change.
class CapturableStep {
 public:
  virtual ~CapturableStep() = default;
  // Why the next step() cannot be captured (empty: it can): a step that is not one fused kernel
  // per group, or state that the next step would make (a first step).
  virtual std::string whyNotCapturable() const = 0;
  // From now on step() reads group i's learning rate from lrs[i] (float32, one element, on its
  // parameters' device) instead of its options; the caller keeps them filled. Empty: the options.
  virtual void readLrFrom(std::vector<torch::Tensor> lrs) = 0;
  // Every group's hyperparameters that a captured step holds fixed (all but the learning rate):
  // when they change, the step is captured again.
  virtual std::vector<double> fixedHyperparameters() const = 0;
  // The captured step ran again without the host (a replay): host-side copies of device state
  // (step counts) are stale until read back.
  virtual void replayed() {}
};

// An Optimizer around the LibTorch optimizer O with group options G and parameter state S
// (torch::optim::SGD, SGDOptions, SGDParamState; ...); the plugin says how the momentum is set and
// which tensors the state holds.
template <class O, class G, class S>
class TorchOptimizer : public Optimizer {
 public:
  using MomentumSetter = std::function<void(G&, double)>;
  using StateTensors = std::function<std::vector<torch::Tensor*>(S&)>;
  TorchOptimizer(std::unique_ptr<O> optimizer, MomentumSetter momentum, StateTensors state)
      : optimizer_(std::move(optimizer)), momentum_(std::move(momentum)), state_(std::move(state)) {}
  torch::optim::Optimizer& torchOptimizer() override { return *optimizer_; }
  void setMomentum(double m) override {
    for (auto& group : optimizer_->param_groups()) momentum_(static_cast<G&>(group.options()), m);
  }
  void stateToParameters() override {
    for (auto& group : optimizer_->param_groups())
      for (auto& p : group.params()) {
        auto it = optimizer_->state().find(p.unsafeGetTensorImpl());
        if (it == optimizer_->state().end()) continue;
        for (torch::Tensor* t : state_(static_cast<S&>(*it->second)))
          if (t->defined()) *t = t->to(p.device());
      }
  }
  std::unique_ptr<torch::optim::OptimizerParamState> emptyState() const override { return std::make_unique<S>(); }
  std::int64_t stateBytes() override {
    std::int64_t n = 0;
    for (auto& [key, st] : optimizer_->state())
      for (torch::Tensor* t : state_(static_cast<S&>(*st)))
        if (t->defined()) n += static_cast<std::int64_t>(t->nbytes());
    return n;
  }

 private:
  std::unique_ptr<O> optimizer_;
  MomentumSetter momentum_;
  StateTensors state_;
};

// Options every optimizer has: lr (for base_batch samples), base_batch, scale_lr.
struct LrSettings {
  double lr = 0.1;  // each optimizer declares its own default (withLrOptions)
  std::int64_t baseBatch = 256;
  std::string scaleLr = "linear";
};
const OptionTable<LrSettings>& lrOptions();
// The learning-rate options (lr defaulting to `defaultLr`) followed by an optimizer's own.
OptionDecls withLrOptions(OptionDecls own, double defaultLr);
// The model's parameters that require gradients.
NamedParameters trainableParameters(Model& model);
// Parameters split for weight decay: {decayed, exempt (biases and normalisation weights)}.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> splitDecayParameters(const NamedParameters& params);

// Parameter groups with weight decay `wd` on every parameter, or (decayAll false) only on the
// decayed ones of splitDecayParameters and none on the exempt ones; `base` gives the other options.
template <class OptionsT>
std::vector<torch::optim::OptimizerParamGroup> weightDecayGroups(const NamedParameters& params, const OptionsT& base,
                                                                 double wd, bool decayAll) {
  auto with = [&](double decay) {
    auto o = std::make_unique<OptionsT>(base);
    o->weight_decay(decay);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (decayAll) {
    std::vector<torch::Tensor> all;  // in the parameters' order
    for (const auto& p : params)
      if (p.value().requires_grad()) all.push_back(p.value());
    groups.emplace_back(all, with(wd));
  } else {
    auto [decay, exempt] = splitDecayParameters(params);
    groups.emplace_back(decay, with(wd));
    if (!exempt.empty()) groups.emplace_back(exempt, with(0.0));
  }
  return groups;
}

}  // namespace exprun
