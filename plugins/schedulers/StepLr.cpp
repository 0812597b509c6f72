// Purpose: scheduler `step` — multiply the learning rate by gamma every step_epochs epochs
// (counted from epoch 0, like torch.optim.lr_scheduler.StepLR stepped per epoch), after an
// optional warm-up.
#include <cmath>

#include "runner/api/Schedule.h"

namespace exprun {
namespace {

struct StepSettings {
  std::int64_t stepEpochs = 30;
  double gamma = 0.1;
};
const OptionTable<StepSettings> kOptions{{
    field("step_epochs", &StepSettings::stepEpochs, "epochs between decays", {1}),
    field("gamma", &StepSettings::gamma, "decay factor", {0.0, 1.0}),
}};

class StepLr : public LrSchedule {
 public:
  StepLr(const ScheduleContext& ctx, StepSettings s) : ctx_(ctx), s_(s) {}
  double lr(std::int64_t step) const override {
    const std::int64_t epoch = step / ctx_.stepsPerEpoch;
    return ctx_.baseLr * std::pow(s_.gamma, static_cast<double>(epoch / s_.stepEpochs));
  }

 private:
  ScheduleContext ctx_;
  StepSettings s_;
};

std::unique_ptr<LrSchedule> makeStep(const Options& o, const ScheduleContext& ctx) {
  const StepSettings s = kOptions.read(o);
  return withWarmup(o, ctx, [&](const ScheduleContext& rest) { return std::make_unique<StepLr>(rest, s); });
}

const Register<SchedulerKind> kRegistered{"step", "decay by gamma every step_epochs epochs, after warmup",
                                          withWarmupOptions(kOptions.decls()), makeStep};

}  // namespace
}  // namespace exprun
