// Purpose: scheduler `multistep` — multiply the learning rate by gamma at each milestone epoch
// (absolute epochs, as in the ImageNet reference: 30, 60, 80).
#include "runner/train/Schedule.h"

#include <cmath>

namespace exprun {
namespace {

class MultiStepLr : public LrSchedule {
 public:
  MultiStepLr(const Options& o, const ScheduleContext& c)
      : LrSchedule(o, c), milestones_(o.getIntList("milestones")), gamma_(o.getFloat("gamma")) {}

 protected:
  double afterWarmup(std::int64_t step) const override {
    std::int64_t epoch = step / ctx_.stepsPerEpoch;
    int passed = 0;
    for (auto m : milestones_) passed += epoch >= m ? 1 : 0;
    return ctx_.baseLr * std::pow(gamma_, passed);
  }

 private:
  std::vector<std::int64_t> milestones_;
  double gamma_;
};

const bool kRegistered = (schedulerRegistry().add(
                              "multistep", "decay by gamma at each milestone epoch, after warmup",
                              withWarmupOptions({intListOpt("milestones", {30, 60, 80}, "epochs at which to decay", 1),
                                                 floatOpt("gamma", 0.1, "decay factor", 0.0, 1.0)}),
                              [](const Options& o, const ScheduleContext& c) { return std::make_unique<MultiStepLr>(o, c); }),
                          true);

}  // namespace
}  // namespace exprun
