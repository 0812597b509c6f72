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
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Names of the stages whose activations can be recomputed in backward instead of stored
  // (train.activation_checkpointing), e.g. layer1..layer4.
  virtual std::vector<std::string> stages() const { return {}; }
  void setRecomputed(std::vector<std::string> names) { recomputed_ = std::move(names); }
  const std::vector<std::string>& recomputed() const { return recomputed_; }

 protected:
  // Runs stage `name` (fn on x), recomputed in backward when selected. Models call it from forward().
  torch::Tensor stage(const std::string& name, const std::function<torch::Tensor(torch::Tensor)>& fn, torch::Tensor x);

 private:
  std::vector<std::string> recomputed_;
  std::map<std::string, std::function<torch::Tensor(torch::Tensor)>> stageFns_;  // outlive the backward pass
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

// Parameters of a model (elements).
std::int64_t countParameters(Model& model);

}  // namespace exprun
