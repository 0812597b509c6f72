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

bool Model::recomputing(const std::string& name) const {
  return is_training() && torch::GradMode::is_enabled() &&
         std::find(recomputed_.begin(), recomputed_.end(), name) != recomputed_.end();
}

torch::Tensor Model::stage(const std::string& name, const StageBlock& fn, torch::Tensor x) {
  if (!recomputing(name)) return fn(x);
  auto it = stageFns_.find(name);
  if (it == stageFns_.end()) it = stageFns_.emplace(name, fn).first;
  return recompute(&it->second, x);
}

torch::Tensor Model::stage(const std::string& name, const std::vector<StageBlock>& blocks, torch::Tensor x) {
  const auto n = static_cast<std::int64_t>(blocks.size());
  if (!recomputing(name)) {  // the common case: the blocks in order, nothing copied
    for (const auto& b : blocks) x = b(x);
    return x;
  }
  if (every_ <= 0 || every_ >= n) {
    return stage(name, [blocks](torch::Tensor t) {  // a copy: it runs again in backward
      for (const auto& b : blocks) t = b(t);
      return t;
    }, x);
  }
  for (std::int64_t first = 0; first < n; first += every_) {
    const std::string key = name + "#" + std::to_string(first);
    auto it = stageFns_.find(key);
    if (it == stageFns_.end()) {
      std::vector<StageBlock> segment(blocks.begin() + first, blocks.begin() + std::min(n, first + every_));
      it = stageFns_.emplace(key, [segment](torch::Tensor t) {
             for (const auto& b : segment) t = b(t);
             return t;
           }).first;
    }
    x = recompute(&it->second, x);
  }
  return x;
}

void weightsToChannelsLast(torch::nn::Module& model) {
  torch::NoGradGuard g;
  for (auto& w : model.parameters())
    if (w.dim() == 4)
      w.set_data(w.data().to(w.options(), /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::ChannelsLast));
}

std::int64_t countParameters(Model& model) {
  std::int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

}  // namespace exprun
