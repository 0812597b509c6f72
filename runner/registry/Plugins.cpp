// Purpose: the option groups shared by plugins of one kind, and the Model's stages.
#include "runner/registry/Plugins.h"

#include <algorithm>

#include "runner/train/Recompute.h"

namespace exprun {

const OptionTable<ModelShape>& modelShapeOptions() {
  static const OptionTable<ModelShape> table{{
      field("in_channels", &ModelShape::inChannels, "input channels (0: from the data)", {0}),
      field("num_classes", &ModelShape::numClasses, "output classes (0: from the data)", {0}),
  }};
  return table;
}
OptionDecls withModelShapeOptions(OptionDecls own) {
  OptionDecls d = modelShapeOptions().decls();
  d.insert(d.end(), own.begin(), own.end());
  return d;
}

const OptionTable<LrSettings>& lrOptions() {
  static const OptionTable<LrSettings> table{{
      field("lr", &LrSettings::lr, "learning rate for base_batch samples per optimizer step", {0.0}),
      field("base_batch", &LrSettings::baseBatch, "the batch size lr is given for", {1}),
      oneOf("scale_lr", &LrSettings::scaleLr, {"linear", "sqrt", "none"},
             "scale lr to the global batch (batch x processes x accumulation)"),
  }};
  return table;
}
OptionDecls withLrOptions(OptionDecls own, double defaultLr) {
  OptionDecls d = lrOptions().decls();
  for (auto& decl : d)
    if (decl.name == "lr") decl.defaultValue = defaultLr;
  d.insert(d.end(), own.begin(), own.end());
  return d;
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
      std::find(recomputed_.begin(), recomputed_.end(), name) == recomputed_.end())
    return fn(x);
  auto it = stageFns_.find(name);
  if (it == stageFns_.end()) it = stageFns_.emplace(name, fn).first;
  return recompute(&it->second, x);
}

std::int64_t countParameters(Model& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace exprun
