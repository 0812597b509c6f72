// Purpose: learning-rate schedules (torch-free). Every schedule has a linear warmup
// (warmup_epochs or warmup_steps, from warmup_start_factor × lr up to lr) and is evaluated at each
// optimizer step. After warmup: constant / step / multistep (milestones in absolute epochs) /
// cosine (from the end of warmup to the last step).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "runner/registry/Registry.h"
#include "runner/spec/Options.h"

namespace exprun {

struct ScheduleContext {
  double baseLr = 0.1;          // already scaled to the global batch
  std::int64_t stepsPerEpoch = 1;
  std::int64_t totalSteps = 1;  // optimizer steps of the whole run
};

class LrSchedule {
 public:
  LrSchedule(const Options& opts, const ScheduleContext& ctx);
  virtual ~LrSchedule() = default;
  // Learning rate for optimizer step `step` (0-based).
  double lr(std::int64_t step) const;
  std::int64_t warmupSteps() const { return warmupSteps_; }

 protected:
  // Learning rate after warmup at step `step` (absolute step count).
  virtual double afterWarmup(std::int64_t step) const = 0;
  ScheduleContext ctx_;

 private:
  std::int64_t warmupSteps_ = 0;
  double warmupStart_ = 0.0;
};

// Warmup options every scheduler declares.
OptionDecls withWarmupOptions(OptionDecls own);

using SchedulerFactory = std::function<std::unique_ptr<LrSchedule>(const Options&, const ScheduleContext&)>;
Registry<SchedulerFactory>& schedulerRegistry();

// Learning-rate scaling rule of the optimizers: lr is given for base_batch samples.
double scaleLearningRate(double lr, std::int64_t baseBatch, std::int64_t globalBatch, const std::string& rule);

}  // namespace exprun
