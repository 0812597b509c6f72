// Purpose: optimizer `adamw` — torch::optim::AdamW (decoupled weight decay); biases and
// normalisation weights can be exempted from weight decay.
#include "runner/registry/Plugins.h"

namespace exprun {
namespace {

std::unique_ptr<torch::optim::Optimizer> makeAdamW(const Options& o, Model& model, double lr) {
  const double wd = o.getFloat("weight_decay");
  auto base = torch::optim::AdamWOptions(lr)
                  .betas({o.getFloat("beta1"), o.getFloat("beta2")})
                  .eps(o.getFloat("eps"));
  return std::make_unique<torch::optim::AdamW>(weightDecayGroups(model, base, wd, o.getBool("decay_norm_and_bias")),
                                               base);
}

const bool kRegistered = (optimizerRegistry().add(
                              "adamw", "Adam with decoupled weight decay (torch::optim::AdamW)",
                              withLrOptions({floatOpt("beta1", 0.9, "first-moment decay", 0.0, 1.0),
                                             floatOpt("beta2", 0.999, "second-moment decay", 0.0, 1.0),
                                             floatOpt("eps", 1e-8, "denominator term", 0.0),
                                             floatOpt("weight_decay", 0.05, "decoupled weight decay", 0.0),
                                             boolOpt("decay_norm_and_bias", false,
                                                     "apply weight decay to biases and normalisation weights too")},
                                            1e-3),
                              makeAdamW),
                          true);

}  // namespace
}  // namespace exprun
