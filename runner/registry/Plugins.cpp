// Purpose: the torch-side registries and the option helpers shared by plugins of one kind.
#include "runner/registry/Plugins.h"

#include <algorithm>

#include "runner/train/Checkpoint.h"

namespace exprun {

Registry<DataFactory>& dataRegistry() {
  static Registry<DataFactory> r("data");
  return r;
}
Registry<ModelFactory>& modelRegistry() {
  static Registry<ModelFactory> r("model");
  return r;
}
Registry<OptimizerFactory>& optimizerRegistry() {
  static Registry<OptimizerFactory> r("optimizer");
  return r;
}

OptionDecls withModelShapeOptions(OptionDecls own) {
  own.insert(own.begin(), {intOpt("in_channels", 0, "input channels (0: from the data)", 0),
                           intOpt("num_classes", 0, "output classes (0: from the data)", 0)});
  return own;
}
std::int64_t resolvedInChannels(const Options& o, const DataInfo& d) {
  return o.getInt("in_channels") > 0 ? o.getInt("in_channels") : d.channels;
}
std::int64_t resolvedNumClasses(const Options& o, const DataInfo& d) {
  return o.getInt("num_classes") > 0 ? o.getInt("num_classes") : d.numClasses;
}

OptionDecls withLrOptions(OptionDecls own, double defaultLr) {
  own.insert(own.begin(),
             {floatOpt("lr", defaultLr, "learning rate for base_batch samples per optimizer step", 0.0),
              intOpt("base_batch", 256, "the batch size lr is given for", 1),
              stringOpt("scale_lr", std::string("linear"),
                        "scale lr to the global batch (batch x processes x accumulation)",
                        {"linear", "sqrt", "none"})});
  return own;
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> splitDecayParameters(Model& model) {
  std::vector<torch::Tensor> decay, exempt;
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    // Biases and the 1-d weights of normalisation layers are exempt (timm/torchvision convention).
    (p.value().dim() <= 1 ? exempt : decay).push_back(p.value());
  }
  return {decay, exempt};
}

torch::Tensor Model::stage(const std::string& name, const std::function<torch::Tensor(torch::Tensor)>& fn,
                           torch::Tensor x) {
  if (!is_training() || !torch::GradMode::is_enabled() ||
      std::find(checkpointed_.begin(), checkpointed_.end(), name) == checkpointed_.end())
    return fn(x);
  auto it = stageFns_.find(name);
  if (it == stageFns_.end()) it = stageFns_.emplace(name, fn).first;
  return exprun::checkpointed(&it->second, x);
}

std::int64_t countParameters(Model& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace exprun
