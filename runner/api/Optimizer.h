// Purpose: what the `optimizer` plugin kind shares — the learning-rate options every optimizer has
// (lr for base_batch samples, base_batch, scale_lr) and the parameter groups with and without
// weight decay (biases and normalisation weights exempt). An optimizer plugin builds a
// torch::optim::Optimizer (runner/api/Kinds.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

// Options every optimizer has: lr (for base_batch samples), base_batch, scale_lr.
struct LrSettings {
  double lr = 0.1;  // each optimizer declares its own default (withLrOptions)
  std::int64_t baseBatch = 256;
  std::string scaleLr = "linear";
};
const OptionTable<LrSettings>& lrOptions();
// The learning-rate options (lr defaulting to `defaultLr`) followed by an optimizer's own.
OptionDecls withLrOptions(OptionDecls own, double defaultLr);
// Parameters split for weight decay: {decayed, exempt (biases and normalisation weights)}.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> splitDecayParameters(Model& model);

// Parameter groups with weight decay `wd` on every parameter, or (decayAll false) only on the
// decayed ones of splitDecayParameters and none on the exempt ones; `base` gives the other options.
template <class OptionsT>
std::vector<torch::optim::OptimizerParamGroup> weightDecayGroups(Model& model, const OptionsT& base, double wd,
                                                                 bool decayAll) {
  auto with = [&](double decay) {
    auto o = std::make_unique<OptionsT>(base);
    o->weight_decay(decay);
    return o;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (decayAll) {
    groups.emplace_back(model.parameters(), with(wd));
  } else {
    auto [decay, exempt] = splitDecayParameters(model);
    groups.emplace_back(decay, with(wd));
    if (!exempt.empty()) groups.emplace_back(exempt, with(0.0));
  }
  return groups;
}

}  // namespace exprun
