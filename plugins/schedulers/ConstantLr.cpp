// Purpose: scheduler `constant` — the (scaled) learning rate after warmup, unchanged.
#include "runner/train/Schedule.h"

namespace exprun {
namespace {

class ConstantLr : public LrSchedule {
 public:
  using LrSchedule::LrSchedule;

 protected:
  double afterWarmup(std::int64_t) const override { return ctx_.baseLr; }
};

const bool kRegistered = (schedulerRegistry().add(
                              "constant", "constant learning rate after warmup", withWarmupOptions({}),
                              [](const Options& o, const ScheduleContext& c) { return std::make_unique<ConstantLr>(o, c); }),
                          true);

}  // namespace
}  // namespace exprun
