// Purpose: warmup logic shared by every schedule, the scheduler registry, LR scaling.
#include "runner/train/Schedule.h"

#include <cmath>
#include <stdexcept>

namespace exprun {

LrSchedule::LrSchedule(const Options& opts, const ScheduleContext& ctx) : ctx_(ctx) {
  std::int64_t steps = opts.getInt("warmup_steps");
  if (steps == 0) steps = static_cast<std::int64_t>(std::llround(opts.getFloat("warmup_epochs") * ctx.stepsPerEpoch));
  warmupSteps_ = steps;
  warmupStart_ = opts.getFloat("warmup_start_factor");
}

double LrSchedule::lr(std::int64_t step) const {
  if (step < warmupSteps_) {
    double f = warmupStart_ + (1.0 - warmupStart_) * static_cast<double>(step) / static_cast<double>(warmupSteps_);
    return ctx_.baseLr * f;
  }
  return afterWarmup(step);
}

OptionDecls withWarmupOptions(OptionDecls own) {
  own.push_back(floatOpt("warmup_epochs", 0.0, "linear warmup length in epochs (fractions allowed)", 0.0));
  own.push_back(intOpt("warmup_steps", 0, "linear warmup length in optimizer steps (overrides warmup_epochs when > 0)", 0));
  own.push_back(floatOpt("warmup_start_factor", 0.1, "warmup starts at this fraction of the learning rate", 0.0, 1.0));
  return own;
}

Registry<SchedulerFactory>& schedulerRegistry() {
  static Registry<SchedulerFactory> r("scheduler");
  return r;
}

double scaleLearningRate(double lr, std::int64_t baseBatch, std::int64_t globalBatch, const std::string& rule) {
  double ratio = static_cast<double>(globalBatch) / static_cast<double>(baseBatch);
  if (rule == "linear") return lr * ratio;
  if (rule == "sqrt") return lr * std::sqrt(ratio);
  if (rule == "none") return lr;
  throw std::invalid_argument("unknown LR scaling rule '" + rule + "'");
}

}  // namespace exprun
