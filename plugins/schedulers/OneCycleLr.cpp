// Purpose: scheduler `onecycle` — PyTorch's OneCycleLR (Smith's 1cycle policy), step for step:
// from max_lr / div_factor up to max_lr over the first pct_start of the run's optimizer steps,
// then down to max_lr / div_factor / final_div_factor, by cosine or linear annealing (or, with
// three_phase, up, back down to the start and then to the minimum). max_lr is the optimizer's lr
// scaled to the global batch. With cycle_momentum, SGD's momentum (AdamW's beta1) moves the other
// way between max_momentum and base_momentum. The warm phase is its own: no warm-up wrapper.
#include <cmath>
#include <vector>

#include "runner/api/Schedule.h"

namespace exprun {
namespace {

struct OneCycleSettings {
  double pctStart = 0.3;
  std::string annealStrategy = "cos";
  bool cycleMomentum = true;
  double baseMomentum = 0.85;
  double maxMomentum = 0.95;
  double divFactor = 25.0;
  double finalDivFactor = 1e4;
  bool threePhase = false;
};
using S = OneCycleSettings;
const OptionTable<S> kOptions{{
    field("pct_start", &S::pctStart, "fraction of the steps spent increasing the learning rate", {0.0, 1.0}),
    oneOf("anneal_strategy", &S::annealStrategy, {"cos", "linear"}, "annealing between the phases' end points"),
    field("cycle_momentum", &S::cycleMomentum, "cycle SGD's momentum (AdamW's beta1) inversely to the learning rate"),
    field("base_momentum", &S::baseMomentum, "lowest momentum (at the learning rate's peak)", {0.0, 1.0}),
    field("max_momentum", &S::maxMomentum, "highest momentum (at the start and the end)", {0.0, 1.0}),
    field("div_factor", &S::divFactor, "initial lr = max_lr / div_factor", {1e-12}),
    field("final_div_factor", &S::finalDivFactor, "final lr = initial lr / final_div_factor", {1e-12}),
    field("three_phase", &S::threePhase, "a third phase annealing from the initial lr down to the final one"),
}};

class OneCycleLr : public LrSchedule {
 public:
  OneCycleLr(const ScheduleContext& ctx, const OneCycleSettings& s) : s_(s) {
    const double maxLr = ctx.baseLr, initial = maxLr / s.divFactor, min = initial / s.finalDivFactor;
    const double total = static_cast<double>(ctx.totalSteps), up = s.pctStart * total - 1;
    if (s.threePhase)
      phases_ = {{up, initial, maxLr, s.maxMomentum, s.baseMomentum},
                 {2 * s.pctStart * total - 2, maxLr, initial, s.baseMomentum, s.maxMomentum},
                 {total - 1, initial, min, s.maxMomentum, s.maxMomentum}};
    else
      phases_ = {{up, initial, maxLr, s.maxMomentum, s.baseMomentum},
                 {total - 1, maxLr, min, s.baseMomentum, s.maxMomentum}};
  }
  double lr(std::int64_t step) const override { return at(step).first; }
  std::optional<double> momentum(std::int64_t step) const override {
    if (!s_.cycleMomentum) return std::nullopt;
    return at(step).second;
  }

 private:
  struct Phase {
    double endStep, startLr, endLr, startMomentum, endMomentum;
  };
  double anneal(double start, double end, double pct) const {
    if (s_.annealStrategy == "linear") return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (std::cos(M_PI * pct) + 1);
  }
  // (lr, momentum) of `step`, as OneCycleLR.get_lr computes them.
  std::pair<double, double> at(std::int64_t step) const {
    const double n = static_cast<double>(step);
    double startStep = 0.0;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      const Phase& p = phases_[i];
      if (n <= p.endStep || i + 1 == phases_.size()) {
        const double pct = (n - startStep) / (p.endStep - startStep);
        return {anneal(p.startLr, p.endLr, pct), anneal(p.startMomentum, p.endMomentum, pct)};
      }
      startStep = p.endStep;
    }
    return {0.0, 0.0};
  }

  OneCycleSettings s_;
  std::vector<Phase> phases_;
};

const Register<SchedulerKind> kRegistered{
    "onecycle", "1cycle policy (torch.optim.lr_scheduler.OneCycleLR): up to lr, then annealed far below it",
    kOptions.decls(), [](const Options& o, const ScheduleContext& ctx) -> std::unique_ptr<LrSchedule> {
      return std::make_unique<OneCycleLr>(ctx, kOptions.read(o));
    }};

}  // namespace
}  // namespace exprun
