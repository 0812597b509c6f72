// Purpose: the `model` plugin kind's interface — a Model (a torch::nn::Module with a forward and,
// optionally, named stages whose activations can be recomputed in backward), and the options every
// model has (in_channels, num_classes: 0 takes them from the data).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runner/api/Data.h"
#include "runner/api/Kinds.h"
#include "runner/api/ModelGraph.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Names of the stages whose activations can be recomputed in backward instead of stored
  // (train.activation_checkpointing), e.g. layer1..layer4.
  virtual std::vector<std::string> stages() const { return {}; }
  // The stages recomputed in backward, and how: `every` = 0 recomputes a stage at once (only its
  // input kept); every = N ≥ 1 in segments of N blocks (each segment's input kept: 1 is block by
  // block, as timm's checkpoint_seq(every=1) and torch.utils.checkpoint.checkpoint_sequential do),
  // for stages a model gives as blocks.
  void setRecomputed(std::vector<std::string> names, std::int64_t every = 0) {
    recomputed_ = std::move(names);
    every_ = every;
  }
  const std::vector<std::string>& recomputed() const { return recomputed_; }
  // The model's layers as a graph (runner/api/ModelGraph.h), for channel pruning and int8
  // quantization; empty for a model that does not describe itself.
  virtual ModelGraph graph() { return {}; }
  std::int64_t recomputedEvery() const { return every_; }

 protected:
  using StageBlock = std::function<torch::Tensor(torch::Tensor)>;
  // Runs stage `name` (fn on x), recomputed in backward when selected. Models call it from forward().
  torch::Tensor stage(const std::string& name, const StageBlock& fn, torch::Tensor x);
  // The same for a stage made of blocks run in order; recomputed in segments of `every` blocks.
  torch::Tensor stage(const std::string& name, const std::vector<StageBlock>& blocks, torch::Tensor x);

 private:
  bool recomputing(const std::string& name) const;
  std::vector<std::string> recomputed_;
  std::int64_t every_ = 0;
  std::map<std::string, StageBlock> stageFns_;  // outlive the backward pass
};

// Options every model has: in_channels, num_classes (0: from the data).
struct ModelShape {
  std::int64_t inChannels = 0;
  std::int64_t numClasses = 0;
  std::int64_t channels(const DataInfo& d) const { return inChannels > 0 ? inChannels : d.channels; }
  std::int64_t classes(const DataInfo& d) const { return numClasses > 0 ? numClasses : d.numClasses; }
};
const OptionTable<ModelShape>& modelShapeOptions();
// The shape options followed by a model's own.
OptionDecls withModelShapeOptions(OptionDecls own);

// Every 4-d weight in NHWC (channels_last) strides, as PyTorch's Module.to(memory_format=...) does:
// to(), not contiguous(), so that a weight whose layout is ambiguous (one input channel, 1x1
// kernels) gets NHWC strides too — else oneDNN gives that convolution NCHW outputs (measured: the
// small_cnn's first stage).
void weightsToChannelsLast(torch::nn::Module& model);

// Parameters of a model (elements).
std::int64_t countParameters(Model& model);

}  // namespace exprun
