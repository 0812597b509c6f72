// Purpose: scheduler `cosine` — half-cosine decay from lr at the end of warmup to
// min_factor × lr at the last optimizer step.
#include "runner/train/Schedule.h"

#include <algorithm>
#include <cmath>

namespace exprun {
namespace {

class CosineLr : public LrSchedule {
 public:
  CosineLr(const Options& o, const ScheduleContext& c) : LrSchedule(o, c), minFactor_(o.getFloat("min_factor")) {}

 protected:
  double afterWarmup(std::int64_t step) const override {
    const double span = static_cast<double>(std::max<std::int64_t>(1, ctx_.totalSteps - warmupSteps()));
    const double t = std::min(1.0, static_cast<double>(step - warmupSteps()) / span);
    const double minLr = ctx_.baseLr * minFactor_;
    return minLr + (ctx_.baseLr - minLr) * 0.5 * (1.0 + std::cos(M_PI * t));
  }

 private:
  double minFactor_;
};

const bool kRegistered = (schedulerRegistry().add(
                              "cosine", "cosine decay to min_factor x lr over the steps after warmup",
                              withWarmupOptions({floatOpt("min_factor", 0.0, "final lr as a fraction of lr", 0.0, 1.0)}),
                              [](const Options& o, const ScheduleContext& c) { return std::make_unique<CosineLr>(o, c); }),
                          true);

}  // namespace
}  // namespace exprun
