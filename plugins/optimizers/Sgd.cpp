// Purpose: optimizer `sgd` — torch::optim::SGD with momentum, Nesterov and weight decay; biases
// and normalisation weights can be exempted from weight decay (`decay_norm_and_bias: false`).
#include "runner/api/Optimizer.h"

namespace exprun {
namespace {

struct SgdSettings {
  double momentum = 0.9;
  bool nesterov = false;
  double weightDecay = 1e-4;
  bool decayNormAndBias = true;
};
const OptionTable<SgdSettings> kOptions{{
    field("momentum", &SgdSettings::momentum, "momentum factor", {0.0, 1.0}),
    field("nesterov", &SgdSettings::nesterov, "Nesterov momentum"),
    field("weight_decay", &SgdSettings::weightDecay, "L2 penalty", {0.0}),
    field("decay_norm_and_bias", &SgdSettings::decayNormAndBias,
          "apply weight decay to biases and normalisation weights too"),
}};

std::unique_ptr<Optimizer> makeSgd(const Options& o, Model& model, double lr) {
  const SgdSettings s = kOptions.read(o);
  if (s.nesterov && s.momentum <= 0.0)
    throw std::invalid_argument("optimizer.nesterov: Nesterov momentum requires momentum > 0");
  auto base = torch::optim::SGDOptions(lr).momentum(s.momentum).nesterov(s.nesterov);
  using SGD = torch::optim::SGD;
  using State = torch::optim::SGDParamState;
  return std::make_unique<TorchOptimizer<SGD, torch::optim::SGDOptions, State>>(
      std::make_unique<SGD>(weightDecayGroups(model, base, s.weightDecay, s.decayNormAndBias), base),
      [](torch::optim::SGDOptions& g, double m) { g.momentum(m); },
      [](State& st) { return std::vector<torch::Tensor*>{&st.momentum_buffer()}; });
}

const Register<OptimizerKind> kRegistered{"sgd", "stochastic gradient descent with momentum (torch::optim::SGD)",
                                          withLrOptions(kOptions.decls(), 0.1), makeSgd};

}  // namespace
}  // namespace exprun
