// Purpose: scheduler `constant` — the (scaled) learning rate, unchanged, after an optional warm-up.
#include "runner/api/Schedule.h"

namespace exprun {
namespace {

class ConstantLr : public LrSchedule {
 public:
  explicit ConstantLr(double lr) : lr_(lr) {}
  double lr(std::int64_t) const override { return lr_; }

 private:
  double lr_;
};

std::unique_ptr<LrSchedule> makeConstant(const Options& o, const ScheduleContext& ctx) {
  return withWarmup(o, ctx, [](const ScheduleContext& rest) { return std::make_unique<ConstantLr>(rest.baseLr); });
}

const Register<SchedulerKind> kRegistered{"constant", "constant learning rate after warmup", withWarmupOptions({}),
                                          makeConstant};

}  // namespace
}  // namespace exprun
