// Purpose: scheduler `step` — multiply the learning rate by gamma every step_epochs epochs
// (counted from epoch 0, like torch.optim.lr_scheduler.StepLR stepped per epoch).
#include "runner/train/Schedule.h"

#include <cmath>

namespace exprun {
namespace {

class StepLr : public LrSchedule {
 public:
  StepLr(const Options& o, const ScheduleContext& c)
      : LrSchedule(o, c), stepEpochs_(o.getInt("step_epochs")), gamma_(o.getFloat("gamma")) {}

 protected:
  double afterWarmup(std::int64_t step) const override {
    std::int64_t epoch = step / ctx_.stepsPerEpoch;
    return ctx_.baseLr * std::pow(gamma_, static_cast<double>(epoch / stepEpochs_));
  }

 private:
  std::int64_t stepEpochs_;
  double gamma_;
};

const bool kRegistered =
    (schedulerRegistry().add("step", "decay by gamma every step_epochs epochs, after warmup",
                             withWarmupOptions({intOpt("step_epochs", 30, "epochs between decays", 1),
                                                floatOpt("gamma", 0.1, "decay factor", 0.0, 1.0)}),
                             [](const Options& o, const ScheduleContext& c) { return std::make_unique<StepLr>(o, c); }),
     true);

}  // namespace
}  // namespace exprun
