// Purpose: optimizer `sgd` — torch::optim::SGD with momentum, Nesterov and weight decay; biases
// and normalisation weights can be exempted from weight decay (`decay_norm_and_bias: false`).
#include "runner/registry/Plugins.h"

namespace exprun {
namespace {

std::unique_ptr<torch::optim::Optimizer> makeSgd(const Options& o, Model& model, double lr) {
  const double wd = o.getFloat("weight_decay");
  auto base = torch::optim::SGDOptions(lr).momentum(o.getFloat("momentum")).nesterov(o.getBool("nesterov"));
  if (o.getBool("nesterov") && o.getFloat("momentum") <= 0.0)
    throw std::invalid_argument("optimizer.nesterov: Nesterov momentum requires momentum > 0");
  return std::make_unique<torch::optim::SGD>(weightDecayGroups(model, base, wd, o.getBool("decay_norm_and_bias")), base);
}

const bool kRegistered = (optimizerRegistry().add(
                              "sgd", "stochastic gradient descent with momentum (torch::optim::SGD)",
                              withLrOptions({floatOpt("momentum", 0.9, "momentum factor", 0.0, 1.0),
                                             boolOpt("nesterov", false, "Nesterov momentum"),
                                             floatOpt("weight_decay", 1e-4, "L2 penalty", 0.0),
                                             boolOpt("decay_norm_and_bias", true,
                                                     "apply weight decay to biases and normalisation weights too")},
                                            0.1),
                              makeSgd),
                          true);

}  // namespace
}  // namespace exprun
