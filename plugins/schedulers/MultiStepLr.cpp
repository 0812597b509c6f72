// Purpose: scheduler `multistep` — multiply the learning rate by gamma at each milestone epoch
// (absolute epochs, as in the ImageNet reference: 30, 60, 80), after an optional warm-up.
#include <cmath>

#include "runner/api/Schedule.h"

namespace exprun {
namespace {

struct MultiStepSettings {
  std::vector<std::int64_t> milestones{30, 60, 80};
  double gamma = 0.1;
};
const OptionTable<MultiStepSettings> kOptions{{
    field("milestones", &MultiStepSettings::milestones, "epochs at which to decay", {1}),
    field("gamma", &MultiStepSettings::gamma, "decay factor", {0.0, 1.0}),
}};

class MultiStepLr : public LrSchedule {
 public:
  MultiStepLr(const ScheduleContext& ctx, MultiStepSettings s) : ctx_(ctx), s_(std::move(s)) {}
  double lr(std::int64_t step) const override {
    const std::int64_t epoch = step / ctx_.stepsPerEpoch;
    int passed = 0;
    for (auto m : s_.milestones) passed += epoch >= m ? 1 : 0;
    return ctx_.baseLr * std::pow(s_.gamma, passed);
  }

 private:
  ScheduleContext ctx_;
  MultiStepSettings s_;
};

std::unique_ptr<LrSchedule> makeMultiStep(const Options& o, const ScheduleContext& ctx) {
  const MultiStepSettings s = kOptions.read(o);
  return withWarmup(o, ctx, [&](const ScheduleContext& rest) { return std::make_unique<MultiStepLr>(rest, s); });
}

const Register<SchedulerKind> kRegistered{"multistep", "decay by gamma at each milestone epoch, after warmup",
                                          withWarmupOptions(kOptions.decls()), makeMultiStep};

}  // namespace
}  // namespace exprun
