// Purpose: scheduler `cosine` — half-cosine decay from lr at the end of the warm-up to
// min_factor × lr at the last optimizer step.
#include <algorithm>
#include <cmath>

#include "runner/api/Schedule.h"

namespace exprun {
namespace {

struct CosineSettings {
  double minFactor = 0.0;
};
const OptionTable<CosineSettings> kOptions{{
    field("min_factor", &CosineSettings::minFactor, "final lr as a fraction of lr", {0.0, 1.0}),
}};

class CosineLr : public LrSchedule {
 public:
  CosineLr(const ScheduleContext& ctx, double minFactor) : ctx_(ctx), minFactor_(minFactor) {}
  double lr(std::int64_t step) const override {
    const double span = static_cast<double>(std::max<std::int64_t>(1, ctx_.totalSteps - ctx_.startStep));
    const double t = std::min(1.0, static_cast<double>(step - ctx_.startStep) / span);
    const double minLr = ctx_.baseLr * minFactor_;
    return minLr + (ctx_.baseLr - minLr) * 0.5 * (1.0 + std::cos(M_PI * t));
  }

 private:
  ScheduleContext ctx_;
  double minFactor_;
};

std::unique_ptr<LrSchedule> makeCosine(const Options& o, const ScheduleContext& ctx) {
  const CosineSettings s = kOptions.read(o);
  return withWarmup(o, ctx, [&](const ScheduleContext& rest) { return std::make_unique<CosineLr>(rest, s.minFactor); });
}

const Register<SchedulerKind> kRegistered{"cosine", "cosine decay to min_factor x lr over the steps after warmup",
                                          withWarmupOptions(kOptions.decls()), makeCosine};

}  // namespace
}  // namespace exprun
