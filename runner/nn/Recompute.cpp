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

struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static variable_list forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor anchor, std::int64_t fnAddress) {
    const auto deviceType = x.device().type();
    ctx->saved_data["fn"] = fnAddress;
    ctx->saved_data["rng"] = at::detail::getDefaultCPUGenerator().get_state();
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
    auto gen = at::detail::getDefaultCPUGenerator();
    torch::Tensor current = gen.get_state();
    torch::Tensor out;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(ctx->saved_data["rng"].toTensor());
    }
    {
      std::optional<at::ScalarType> amp;
      if (ctx->saved_data["autocast"].toBool())
        amp = static_cast<at::ScalarType>(ctx->saved_data["autocast_dtype"].toInt());
      AutocastGuard autocast(x.device().type(), amp);
      torch::AutoGradMode enable(true);
      PhaseScope recomputing(Phase::Recompute);
      out = (*fn)(x);
    }
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(current);
    }
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
