// Purpose: optimizer `adamw` — torch::optim::AdamW (decoupled weight decay); biases and
// normalisation weights can be exempted from weight decay. On CUDA the step is ATen's fused
// multi-tensor kernel (`impl`: also on the CPU, with ATen's CPU version of it).
#include <cmath>
#include <map>
#include <optional>
#include <unordered_map>

#include "runner/api/Optimizer.h"

namespace exprun {
namespace {

// How the step is computed (optimizer.impl): auto (fused on CUDA, torch::optim::AdamW elsewhere),
// per_param (torch::optim::AdamW), fused (ATen's fused kernel, on the CPU its CPU version).
enum class AdamWImpl { Auto, PerParam, Fused };

// torch::optim::AdamW whose step, on CUDA, is ATen's fused kernel (_fused_adamw_, what
// torch.optim.AdamW(fused=True) runs: one launch per group and dtype instead of about ten per
// parameter); elsewhere AdamW::step itself (the CPU's results do not change) unless impl: fused.
// The state is AdamW's (step, exp_avg, exp_avg_sq): checkpoints are unchanged. The kernel reads
// the step count from a float tensor per parameter on the parameter's device, kept beside the
// state and made anew from it when they disagree (a checkpoint loaded); as torch.optim's
// _fused_adamw, the counts are raised by one (one multi-tensor add) before the kernel, which
// computes the bias corrections from them and does not count itself.
// Under fp16 loss scaling the kernel reads the scaler's found_inf and skips the step on the device
// (SkipsOnDevice), as torch.optim.AdamW(fused=True) does under GradScaler: the counts of a skipped
// step are taken back on the device (one multi-tensor subtract of the flag). The state's host counts
// then run ahead by the skipped steps; they are read back from the device (one copy) before the
// state is saved, so a checkpoint holds the steps taken.
// In a CUDA graph (CapturableStep) the kernel reads the learning rate from a tensor, and the host's
// counts, which stop moving while the graph replays, are read back before a save as well.
class FusedAdamW final : public torch::optim::AdamW, public SkipsOnDevice, public CapturableStep {
 public:
  FusedAdamW(const std::vector<torch::optim::OptimizerParamGroup>& groups, torch::optim::AdamWOptions defaults,
             AdamWImpl impl)
      : torch::optim::AdamW(groups, std::move(defaults)), impl_(impl) {}

  // The fused kernel runs for every parameter with a gradient: on CUDA, or the CPU with impl: fused.
  bool canSkipOnDevice() const override {
    if (impl_ == AdamWImpl::PerParam) return false;
    bool any = false;
    for (const auto& group : param_groups())
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!p.is_cuda() && impl_ != AdamWImpl::Fused) return false;
        any = true;
      }
    return any;
  }
  void skipWhen(torch::Tensor foundInf) override { foundInf_ = std::move(foundInf); }

  std::string whyNotCapturable() const override {
    if (impl_ == AdamWImpl::PerParam) return "optimizer.impl: per_param steps one parameter at a time";
    for (const auto& group : param_groups())
      for (const auto& p : group.params()) {
        if (!p.grad().defined()) continue;
        if (!p.is_cuda()) return "the parameters are not on CUDA";
        if (!state_.count(p.unsafeGetTensorImpl())) return "the first step makes the optimizer's state";
      }
    return "";
  }
  void readLrFrom(std::vector<torch::Tensor> lrs) override { lrs_ = std::move(lrs); }
  std::vector<double> fixedHyperparameters() const override {
    std::vector<double> v;
    for (const auto& group : param_groups()) {
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      v.insert(v.end(), {std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(),
                         o.amsgrad() ? 1.0 : 0.0});
    }
    return v;
  }
  void replayed() override { countsAhead_ = true; }

  void save(torch::serialize::OutputArchive& archive) const override {
    const_cast<FusedAdamW*>(this)->settleCounts();  // the host's copy of counts kept on the device
    torch::optim::AdamW::save(archive);
  }

  torch::Tensor step(LossClosure closure = nullptr) override {
    bool cuda = false;
    for (auto& group : param_groups())
      for (auto& p : group.params()) cuda = cuda || (p.grad().defined() && p.is_cuda());
    if (impl_ == AdamWImpl::PerParam || (impl_ == AdamWImpl::Auto && !cuda))
      return torch::optim::AdamW::step(std::move(closure));
    torch::NoGradGuard noGrad;
    torch::Tensor loss;
    if (closure) {
      at::AutoGradMode enableGrad(true);
      loss = closure();
    }
    for (std::size_t gi = 0; gi < param_groups().size(); ++gi) {
      auto& group = param_groups()[gi];
      const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
      std::map<std::pair<int, int>, std::vector<torch::Tensor>> byKind;  // (dtype, device index)
      for (auto& p : group.params())
        if (p.grad().defined())
          byKind[{static_cast<int>(p.scalar_type()), static_cast<int>(p.device().index())}].push_back(p);
      for (auto& [kind, params] : byKind) {
        std::vector<torch::Tensor> grads, avgs, sqs, maxSqs, steps;
        for (auto& p : params) {
          auto& st = stateOf(p, o.amsgrad());
          grads.push_back(p.grad());
          avgs.push_back(st.exp_avg());
          sqs.push_back(st.exp_avg_sq());
          if (o.amsgrad()) maxSqs.push_back(st.max_exp_avg_sq());
          steps.push_back(stepTensor(p, st));
          st.step(st.step() + 1);
          counted_[p.unsafeGetTensorImpl()].second = st.step();
        }
        at::_foreach_add_(steps, 1);  // the kernel reads this step's count (1 on the first)
        const std::optional<torch::Tensor> skip =
            foundInf_.defined() ? std::optional<torch::Tensor>(foundInf_.reshape({}).to(params.front().device()))
                                : std::nullopt;
        if (gi < lrs_.size())
          at::_fused_adamw_(params, grads, avgs, sqs, maxSqs, steps, lrs_[gi], std::get<0>(o.betas()),
                            std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false,
                            /*grad_scale=*/std::nullopt, skip);
        else
          at::_fused_adamw_(params, grads, avgs, sqs, maxSqs, steps, o.lr(), std::get<0>(o.betas()),
                            std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false,
                            /*grad_scale=*/std::nullopt, skip);
        if (skip) {  // a skipped step is not counted
          at::_foreach_sub_(steps, std::vector<torch::Tensor>(steps.size(), *skip));
          countsAhead_ = true;
        }
      }
    }
    return loss;
  }

 private:
  torch::optim::AdamWParamState& stateOf(const torch::Tensor& p, bool amsgrad) {
    auto it = state_.find(p.unsafeGetTensorImpl());
    if (it == state_.end()) {
      auto st = std::make_unique<torch::optim::AdamWParamState>();
      st->step(0);
      st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      if (amsgrad) st->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
      it = state_.emplace(p.unsafeGetTensorImpl(), std::move(st)).first;
    }
    return static_cast<torch::optim::AdamWParamState&>(*it->second);
  }

  // The kernel's step count for `p`, on its device, equal to the state's.
  torch::Tensor stepTensor(const torch::Tensor& p, const torch::optim::AdamWParamState& st) {
    auto& [t, count] = counted_[p.unsafeGetTensorImpl()];
    if (!t.defined() || count != st.step())
      t = torch::full({}, static_cast<double>(st.step()), torch::TensorOptions().dtype(torch::kFloat32).device(p.device()));
    return t;
  }

  // After steps the device may have skipped: each parameter's state step set to its device count.
  void settleCounts() {
    if (!countsAhead_) return;
    std::vector<torch::Tensor> counts;
    std::vector<std::pair<std::int64_t*, torch::optim::AdamWParamState*>> into;
    for (auto& [key, entry] : counted_) {
      auto it = state_.find(key);
      if (!entry.first.defined() || it == state_.end()) continue;
      counts.push_back(entry.first.reshape({1}));
      into.emplace_back(&entry.second, static_cast<torch::optim::AdamWParamState*>(it->second.get()));
    }
    if (!counts.empty()) {
      const torch::Tensor host = torch::cat(counts).to(torch::kCPU, torch::kFloat64);  // one wait for the device
      for (std::size_t i = 0; i < into.size(); ++i) {
        into[i].second->step(static_cast<std::int64_t>(std::llround(host[static_cast<std::int64_t>(i)].item<double>())));
        *into[i].first = into[i].second->step();
      }
    }
    countsAhead_ = false;
  }

  AdamWImpl impl_;
  torch::Tensor foundInf_;   // the scaler's flag for the next step (undefined: none)
  bool countsAhead_ = false;  // the host's step counts may differ from the device's (skipped steps, replays)
  std::vector<torch::Tensor> lrs_;  // CapturableStep: each group's learning rate on the device (empty: options)
  std::unordered_map<void*, std::pair<torch::Tensor, std::int64_t>> counted_;
};

struct AdamWSettings {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.05;
  bool decayNormAndBias = false;
  std::string impl = "per_param";  // what has run on a GPU; fused: not yet
};
const OptionTable<AdamWSettings> kOptions{{
    field("beta1", &AdamWSettings::beta1, "first-moment decay", {0.0, 1.0}),
    field("beta2", &AdamWSettings::beta2, "second-moment decay", {0.0, 1.0}),
    field("eps", &AdamWSettings::eps, "denominator term", {0.0}),
    field("weight_decay", &AdamWSettings::weightDecay, "decoupled weight decay", {0.0}),
    field("decay_norm_and_bias", &AdamWSettings::decayNormAndBias,
          "apply weight decay to biases and normalisation weights too"),
    oneOf("impl", &AdamWSettings::impl, {"auto", "per_param", "fused"},
          "how the step runs: per_param (torch::optim::AdamW), fused (ATen's fused kernel; on the CPU its CPU "
          "version), auto (fused on CUDA, per_param elsewhere); fused and auto on CUDA: not yet run on a GPU"),
}};

std::unique_ptr<Optimizer> makeAdamW(const Options& o, const NamedParameters& params, double lr) {
  const AdamWSettings s = kOptions.read(o);
  auto base = torch::optim::AdamWOptions(lr).betas({s.beta1, s.beta2}).eps(s.eps);
  using AdamW = torch::optim::AdamW;
  using State = torch::optim::AdamWParamState;
  return std::make_unique<TorchOptimizer<AdamW, torch::optim::AdamWOptions, State>>(
      std::make_unique<FusedAdamW>(weightDecayGroups(params, base, s.weightDecay, s.decayNormAndBias), base,
                                   s.impl == "fused" ? AdamWImpl::Fused
                                   : s.impl == "per_param" ? AdamWImpl::PerParam
                                                           : AdamWImpl::Auto),
      [](torch::optim::AdamWOptions& g, double beta1) { g.betas({beta1, std::get<1>(g.betas())}); },
      [](State& st) { return std::vector<torch::Tensor*>{&st.exp_avg(), &st.exp_avg_sq(), &st.max_exp_avg_sq()}; });
}

const Register<OptimizerKind> kRegistered{"adamw", "Adam with decoupled weight decay (torch::optim::AdamW; fused multi-tensor step on CUDA)",
                                          withLrOptions(kOptions.decls(), 1e-3), makeAdamW};

}  // namespace
}  // namespace exprun
