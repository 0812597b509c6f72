// Purpose: optimizer `sgd` — torch::optim::SGD with momentum, Nesterov and weight decay; biases
// and normalisation weights can be exempted from weight decay (`decay_norm_and_bias: false`). On
// CUDA the step updates all parameters of a group in one fused kernel (`impl`).
#include <map>

#include "runner/api/Optimizer.h"

namespace exprun {
namespace {

// How the step is computed (optimizer.impl), as torch.optim.SGD's `foreach` and `fused` flags:
//   per_param: torch::optim::SGD::step, one parameter after another;
//   foreach:   the _foreach_ ops over a group's list (SGD::step's per-tensor kernels with the same
//              operands on the CPU, the same bits: tests/plugins/OptimizerTest.cpp), at the cost of
//              one or two gradient-sized temporaries for the whole list at once;
//   fused:     ATen's fused kernel (_fused_sgd_, what torch.optim.SGD(fused=True) runs: one launch per
//              group and dtype instead of four to six per parameter, no temporaries); on the CPU
//              ATen's CPU version of it;
//   auto:      fused on CUDA, per_param elsewhere (the CPU's step, its memory and its results are
//              those of torch::optim::SGD).
// The state is SGD's momentum_buffer: checkpoints are the same whatever the choice.
enum class SgdImpl { Auto, PerParam, Foreach, Fused };

// In a CUDA graph (CapturableStep) the fused kernel reads the learning rate from a tensor.
class MultiTensorSgd final : public torch::optim::SGD, public SkipsOnDevice, public CapturableStep {
 public:
  MultiTensorSgd(const std::vector<torch::optim::OptimizerParamGroup>& groups, torch::optim::SGDOptions defaults,
                 SgdImpl impl)
      : torch::optim::SGD(groups, std::move(defaults)), impl_(impl) {}

  // The fused kernel reads the flag: every group's parameters on it (CUDA, or the CPU with impl:
  // fused), their momentum buffers all made or none.
  bool canSkipOnDevice() const override {
    if (impl_ == SgdImpl::PerParam || impl_ == SgdImpl::Foreach) return false;
    bool any = false;
    for (const auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      std::size_t with = 0, made = 0;
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!p.is_cuda() && impl_ != SgdImpl::Fused) return false;
        ++with;
        if (o.momentum() != 0 && state_.count(p.unsafeGetTensorImpl())) ++made;
      }
      if (o.momentum() != 0 && made != 0 && made != with) return false;
      any = any || with > 0;
    }
    return any;
  }
  void skipWhen(torch::Tensor foundInf) override { foundInf_ = std::move(foundInf); }

  std::string whyNotCapturable() const override {
    if (impl_ == SgdImpl::PerParam || impl_ == SgdImpl::Foreach)
      return std::string("optimizer.impl: ") + (impl_ == SgdImpl::PerParam ? "per_param" : "foreach") +
             " reads the learning rate on the host";
    for (const auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!p.is_cuda()) return "the parameters are not on CUDA";
        if (o.momentum() != 0 && !state_.count(p.unsafeGetTensorImpl()))
          return "the first step makes the momentum buffers";
      }
    }
    return "";
  }
  void readLrFrom(std::vector<torch::Tensor> lrs) override { lrs_ = std::move(lrs); }
  std::vector<double> fixedHyperparameters() const override {
    std::vector<double> v;
    for (const auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      v.insert(v.end(), {o.momentum(), o.dampening(), o.weight_decay(), o.nesterov() ? 1.0 : 0.0});
    }
    return v;
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    if (impl_ == SgdImpl::PerParam) return torch::optim::SGD::step(std::move(closure));
    if (impl_ == SgdImpl::Auto) {
      bool cuda = false;
      for (auto& group : param_groups())
        for (auto& p : group.params()) cuda = cuda || (p.grad().defined() && p.is_cuda());
      if (!cuda) return torch::optim::SGD::step(std::move(closure));
    }
    torch::NoGradGuard noGrad;
    torch::Tensor loss;
    if (closure) {
      at::AutoGradMode enableGrad(true);
      loss = closure();
    }
    for (std::size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      std::vector<torch::Tensor> params, grads, bufs;
      for (auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        params.push_back(p);
        grads.push_back(p.grad());
        if (o.momentum() == 0) continue;
        const auto it = state_.find(p.unsafeGetTensorImpl());
        bufs.push_back(it == state_.end() ? torch::Tensor()
                                          : static_cast<torch::optim::SGDParamState&>(*it->second).momentum_buffer());
      }
      if (params.empty()) continue;
      std::size_t missing = 0;
      for (const auto& b : bufs) missing += b.defined() ? 0 : 1;
      // The fused kernel wants every buffer made or none (a parameter that first had a gradient
      // later than the others: the foreach path for that step).
      if (impl_ != SgdImpl::Foreach && (params.front().is_cuda() || impl_ == SgdImpl::Fused) &&
          (missing == 0 || missing == params.size()))
        fused(o, gi < lrs_.size() ? lrs_[gi] : torch::Tensor(), params, grads, bufs, missing > 0);
      else
        foreach(o, params, grads, bufs);
    }
    return loss;
  }

 private:
  void keep(const torch::Tensor& p, const torch::Tensor& buf) {
    auto st = std::make_unique<torch::optim::SGDParamState>();
    st->momentum_buffer(buf);
    state_[p.unsafeGetTensorImpl()] = std::move(st);
  }

  // ATen's fused kernel, per dtype; on the first step it makes the momentum buffers the gradients.
  void fused(const torch::optim::SGDOptions& o, const torch::Tensor& lr, const std::vector<torch::Tensor>& params,
             const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& bufs, bool first) {
    std::map<std::pair<int, int>, std::vector<std::size_t>> byKind;  // (dtype, device index)
    for (std::size_t i = 0; i < params.size(); ++i)
      byKind[{static_cast<int>(params[i].scalar_type()), static_cast<int>(params[i].device().index())}].push_back(i);
    for (const auto& [kind, idx] : byKind) {
      std::vector<torch::Tensor> p, g, b;
      for (std::size_t i : idx) {
        p.push_back(params[i]);
        g.push_back(grads[i]);
        if (o.momentum() == 0) continue;
        if (first) {  // zeros when the step may be skipped: the next one then starts them from the gradient
          bufs[i] = foundInf_.defined() ? torch::zeros_like(params[i]) : torch::empty_like(params[i]);
          keep(params[i], bufs[i]);
        }
        b.push_back(bufs[i]);
      }
      const std::optional<torch::Tensor> skip =
          foundInf_.defined() ? std::optional<torch::Tensor>(foundInf_) : std::nullopt;
      if (lr.defined())  // in a CUDA graph: read on the device
        at::_fused_sgd_(p, g, b, o.weight_decay(), o.momentum(), lr, o.dampening(), o.nesterov(), /*maximize=*/false,
                        first, /*grad_scale=*/std::nullopt, skip);
      else
        at::_fused_sgd_(p, g, b, o.weight_decay(), o.momentum(), o.lr(), o.dampening(), o.nesterov(),
                        /*maximize=*/false, first, /*grad_scale=*/std::nullopt, skip);
    }
  }

  // SGD::step's arithmetic, op by op over the list.
  void foreach(const torch::optim::SGDOptions& o, const std::vector<torch::Tensor>& params,
               const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>& bufs) {
    std::vector<torch::Tensor> dp = o.weight_decay() != 0 ? at::_foreach_add(grads, params, o.weight_decay()) : grads;
    if (o.momentum() != 0) {
      std::vector<torch::Tensor> oldBufs, oldDp;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (bufs[i].defined()) {
          oldBufs.push_back(bufs[i]);
          oldDp.push_back(dp[i]);
        } else {  // the first step: the buffer is the update itself
          bufs[i] = torch::clone(dp[i]).detach();
          keep(params[i], bufs[i]);
        }
      }
      if (!oldBufs.empty()) {
        at::_foreach_mul_(oldBufs, o.momentum());
        at::_foreach_add_(oldBufs, oldDp, 1 - o.dampening());
      }
      dp = o.nesterov() ? at::_foreach_add(dp, bufs, o.momentum()) : bufs;
    }
    at::_foreach_add_(params, dp, -o.lr());
  }

  SgdImpl impl_;
  torch::Tensor foundInf_;  // SkipsOnDevice's flag for the next step
  std::vector<torch::Tensor> lrs_;  // CapturableStep: each group's learning rate on the device (empty: options)
};

struct SgdSettings {
  double momentum = 0.9;
  bool nesterov = false;
  double weightDecay = 1e-4;
  bool decayNormAndBias = true;
  std::string impl = "per_param";  // what has run on a GPU; fused: not yet
};
const OptionTable<SgdSettings> kOptions{{
    field("momentum", &SgdSettings::momentum, "momentum factor", {0.0, 1.0}),
    field("nesterov", &SgdSettings::nesterov, "Nesterov momentum"),
    field("weight_decay", &SgdSettings::weightDecay, "L2 penalty", {0.0}),
    field("decay_norm_and_bias", &SgdSettings::decayNormAndBias,
          "apply weight decay to biases and normalisation weights too"),
    oneOf("impl", &SgdSettings::impl, {"auto", "per_param", "foreach", "fused"},
          "how the step runs: per_param (torch::optim::SGD), foreach (multi-tensor ops), fused (ATen's fused kernel; "
          "on the CPU its CPU version), auto (fused on CUDA, per_param elsewhere); fused and auto on CUDA: not yet run "
          "on a GPU"),
}};

std::unique_ptr<Optimizer> makeSgd(const Options& o, const NamedParameters& params, double lr) {
  const SgdSettings s = kOptions.read(o);
  if (s.nesterov && s.momentum <= 0.0)
    throw std::invalid_argument("optimizer.nesterov: Nesterov momentum requires momentum > 0");
  const SgdImpl impl = s.impl == "per_param" ? SgdImpl::PerParam
                      : s.impl == "foreach" ? SgdImpl::Foreach
                      : s.impl == "fused"   ? SgdImpl::Fused
                                            : SgdImpl::Auto;
  auto base = torch::optim::SGDOptions(lr).momentum(s.momentum).nesterov(s.nesterov);
  using SGD = torch::optim::SGD;
  using State = torch::optim::SGDParamState;
  return std::make_unique<TorchOptimizer<SGD, torch::optim::SGDOptions, State>>(
      std::make_unique<MultiTensorSgd>(weightDecayGroups(params, base, s.weightDecay, s.decayNormAndBias), base, impl),
      [](torch::optim::SGDOptions& g, double m) { g.momentum(m); },
      [](State& st) { return std::vector<torch::Tensor*>{&st.momentum_buffer()}; });
}

const Register<OptimizerKind> kRegistered{"sgd", "stochastic gradient descent with momentum (torch::optim::SGD; fused multi-tensor step on CUDA)",
                                          withLrOptions(kOptions.decls(), 0.1), makeSgd};

}  // namespace
}  // namespace exprun
