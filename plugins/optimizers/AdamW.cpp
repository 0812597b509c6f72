// Purpose: optimizer `adamw` — torch::optim::AdamW (decoupled weight decay); biases and
// normalisation weights can be exempted from weight decay.
#include "runner/api/Optimizer.h"

namespace exprun {
namespace {

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.05;
  bool decayNormAndBias = false;
};
const OptionTable<AdamWSettings> kOptions{{
    field("beta1", &AdamWSettings::beta1, "first-moment decay", {0.0, 1.0}),
    field("beta2", &AdamWSettings::beta2, "second-moment decay", {0.0, 1.0}),
    field("eps", &AdamWSettings::eps, "denominator term", {0.0}),
    field("weight_decay", &AdamWSettings::weightDecay, "decoupled weight decay", {0.0}),
    field("decay_norm_and_bias", &AdamWSettings::decayNormAndBias,
          "apply weight decay to biases and normalisation weights too"),
}};

std::unique_ptr<Optimizer> makeAdamW(const Options& o, Model& model, double lr) {
  const AdamWSettings s = kOptions.read(o);
  auto base = torch::optim::AdamWOptions(lr).betas({s.beta1, s.beta2}).eps(s.eps);
  using AdamW = torch::optim::AdamW;
  using State = torch::optim::AdamWParamState;
  return std::make_unique<TorchOptimizer<AdamW, torch::optim::AdamWOptions, State>>(
      std::make_unique<AdamW>(weightDecayGroups(model, base, s.weightDecay, s.decayNormAndBias), base),
      [](torch::optim::AdamWOptions& g, double beta1) { g.betas({beta1, std::get<1>(g.betas())}); },
      [](State& st) { return std::vector<torch::Tensor*>{&st.exp_avg(), &st.exp_avg_sq(), &st.max_exp_avg_sq()}; });
}

const Register<OptimizerKind> kRegistered{"adamw", "Adam with decoupled weight decay (torch::optim::AdamW)",
                                          withLrOptions(kOptions.decls(), 1e-3), makeAdamW};

}  // namespace
}  // namespace exprun
