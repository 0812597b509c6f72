// Purpose: the recomputing autograd Function (see Recompute.h).
#include "runner/nn/Recompute.h"

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "runner/nn/Autocast.h"
#include "runner/metrics/Phases.h"

namespace exprun {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The generators dropout may draw from for a tensor on `device`: the CPU's and the device's own,
// each restored for the recomputation as torch.utils.checkpoint does (preserve_rng_state).
std::vector<at::Generator> generatorsFor(const c10::Device& device) {
  std::vector<at::Generator> g{at::detail::getDefaultCPUGenerator()};
  if (!device.is_cpu()) g.push_back(at::globalContext().defaultGenerator(device));
  return g;
}

c10::List<torch::Tensor> statesOf(std::vector<at::Generator> gens) {
  c10::List<torch::Tensor> states;
  for (auto& g : gens) {
    std::lock_guard<std::mutex> lock(g.mutex());
    states.push_back(g.get_state());
  }
  return states;
}

void setStates(std::vector<at::Generator>& gens, const c10::List<torch::Tensor>& states) {
  for (std::size_t i = 0; i < gens.size(); ++i) {
    std::lock_guard<std::mutex> lock(gens[i].mutex());
    gens[i].set_state(states.get(i));
  }
}

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor anchor, std::int64_t fnAddress) {
    const auto deviceType = x.device().type();
    ctx->saved_data["fn"] = fnAddress;
    ctx->saved_data["rng"] = statesOf(generatorsFor(x.device()));
    ctx->saved_data["autocast"] = at::autocast::is_autocast_enabled(deviceType);
    ctx->saved_data["autocast_dtype"] = static_cast<std::int64_t>(at::autocast::get_autocast_dtype(deviceType));
    ctx->saved_data["x_requires_grad"] = x.requires_grad();
    ctx->save_for_backward({x});
    const auto* fn = reinterpret_cast<const StageFn*>(fnAddress);
    return {(*fn)(x)};  // grad mode is off here: no activation is kept
  }

  static variable_list backward(AutogradContext* ctx, variable_list gradOutputs) {
    torch::Tensor x = ctx->get_saved_variables()[0].detach();
    const bool xRequiresGrad = ctx->saved_data["x_requires_grad"].toBool();
    x.requires_grad_(xRequiresGrad);
    const auto* fn = reinterpret_cast<const StageFn*>(ctx->saved_data["fn"].toInt());
    std::vector<at::Generator> gens = generatorsFor(x.device());
    const c10::List<torch::Tensor> current = statesOf(gens);
    torch::Tensor out;
    setStates(gens, ctx->saved_data["rng"].toTensorList());
    {
      std::optional<at::ScalarType> amp;
      if (ctx->saved_data["autocast"].toBool())
        amp = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
      AutocastGuard autocast(x.device().type(), amp);
      torch::AutoGradMode enable(true);
      PhaseScope recomputing(Phase::Recompute);
      out = (*fn)(x);
    }
    setStates(gens, current);
    torch::autograd::backward({out}, {gradOutputs[0]});
    return {xRequiresGrad ? x.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute(const StageFn* fn, const torch::Tensor& x) {
  static thread_local torch::Tensor anchor = torch::zeros({}, torch::requires_grad());
  return RecomputeFunction::apply(x, anchor, reinterpret_cast<std::int64_t>(fn))[0];
}

}  // namespace exprun
