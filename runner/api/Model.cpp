// Purpose: the options every model has, a model's recomputed stages (see Model.h).
#include "runner/api/Model.h"

#include <algorithm>

#include "runner/nn/Recompute.h"

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
