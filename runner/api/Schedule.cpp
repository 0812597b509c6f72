// Purpose: the warm-up wrapper and LR scaling (see Schedule.h).
#include "runner/api/Schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace exprun {

std::int64_t WarmupSettings::length(const ScheduleContext& ctx) const {
  return steps > 0 ? steps : static_cast<std::int64_t>(std::llround(epochs * ctx.stepsPerEpoch));
}

const OptionTable<WarmupSettings>& warmupOptions() {
  using W = WarmupSettings;
  static const OptionTable<W> table{{
      field("warmup_epochs", &W::epochs, "linear warmup length in epochs (fractions allowed)", {0.0}),
      field("warmup_steps", &W::steps, "linear warmup length in optimizer steps (overrides warmup_epochs when > 0)",
            {0}),
      field("warmup_start_factor", &W::startFactor, "warmup starts at this fraction of the learning rate", {0.0, 1.0}),
      oneOf("step_per", &W::stepPer, {"step", "epoch"},
            "when the learning rate changes: every optimizer step, or once an epoch (torchvision's reference script)"),
  }};
  return table;
}

OptionDecls withWarmupOptions(OptionDecls own) {
  const OptionDecls w = warmupOptions().decls();
  own.insert(own.end(), w.begin(), w.end());
  return own;
}

namespace {

class Warmup : public LrSchedule {
 public:
  Warmup(std::unique_ptr<LrSchedule> after, std::int64_t steps, double startFactor, double baseLr)
      : after_(std::move(after)), steps_(steps), start_(startFactor), baseLr_(baseLr) {}
  double lr(std::int64_t step) const override {
    if (step >= steps_) return after_->lr(step);
    const double f = start_ + (1.0 - start_) * static_cast<double>(step) / static_cast<double>(steps_);
    return baseLr_ * f;
  }
  std::optional<double> momentum(std::int64_t step) const override { return after_->momentum(step); }

 private:
  std::unique_ptr<LrSchedule> after_;
  std::int64_t steps_;
  double start_, baseLr_;
};

// A schedule laid out in epochs, held constant over each epoch's optimizer steps.
class PerEpoch : public LrSchedule {
 public:
  PerEpoch(std::unique_ptr<LrSchedule> epochs, std::int64_t stepsPerEpoch)
      : epochs_(std::move(epochs)), stepsPerEpoch_(std::max<std::int64_t>(1, stepsPerEpoch)) {}
  double lr(std::int64_t step) const override { return epochs_->lr(step / stepsPerEpoch_); }
  std::optional<double> momentum(std::int64_t step) const override { return epochs_->momentum(step / stepsPerEpoch_); }

 private:
  std::unique_ptr<LrSchedule> epochs_;
  std::int64_t stepsPerEpoch_;
};

}  // namespace

std::unique_ptr<LrSchedule> withWarmup(
    const Options& o, const ScheduleContext& ctx,
    const std::function<std::unique_ptr<LrSchedule>(const ScheduleContext&)>& after) {
  const WarmupSettings w = warmupOptions().read(o);
  if (w.stepPer == "epoch") {
    if (w.steps > 0)
      throw std::invalid_argument("scheduler.warmup_steps: counts optimizer steps; with step_per: epoch give warmup_epochs");
    ScheduleContext epochs = ctx;
    epochs.stepsPerEpoch = 1;
    const std::int64_t per = std::max<std::int64_t>(1, ctx.stepsPerEpoch);
    epochs.totalSteps = (ctx.totalSteps + per - 1) / per;
    ScheduleContext rest = epochs;
    rest.startStep = w.length(epochs);
    return std::make_unique<PerEpoch>(std::make_unique<Warmup>(after(rest), rest.startStep, w.startFactor, ctx.baseLr),
                                      ctx.stepsPerEpoch);
  }
  ScheduleContext rest = ctx;
  rest.startStep = w.length(ctx);
  return std::make_unique<Warmup>(after(rest), rest.startStep, w.startFactor, ctx.baseLr);
}

double scaleLearningRate(double lr, std::int64_t baseBatch, std::int64_t globalBatch, const std::string& rule) {
  double ratio = static_cast<double>(globalBatch) / static_cast<double>(baseBatch);
  if (rule == "linear") return lr * ratio;
  if (rule == "sqrt") return lr * std::sqrt(ratio);
  if (rule == "none") return lr;
  throw std::invalid_argument("unknown LR scaling rule '" + rule + "'");
}

}  // namespace exprun
