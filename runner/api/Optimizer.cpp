// Purpose: the learning-rate options of every optimizer and the weight-decay split (see Optimizer.h).
#include "runner/api/Optimizer.h"

namespace exprun {

void Optimizer::setLearningRate(double lr) {
  for (auto& group : torchOptimizer().param_groups()) group.options().set_lr(lr);
}

double Optimizer::learningRate() {
  auto& groups = torchOptimizer().param_groups();
  return groups.empty() ? 0.0 : groups.front().options().get_lr();
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

NamedParameters trainableParameters(Model& model) {
  NamedParameters out;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad()) out.insert(p.key(), p.value());
  return out;
}

std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> splitDecayParameters(const NamedParameters& params) {
  std::vector<torch::Tensor> decay, exempt;
  for (const auto& p : params) {
    if (!p.value().requires_grad()) continue;
    // Biases and the 1-d weights of normalisation layers are exempt (timm/torchvision convention).
    (p.value().dim() <= 1 ? exempt : decay).push_back(p.value());
  }
  return {decay, exempt};
}

}  // namespace exprun
