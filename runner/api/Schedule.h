// Purpose: learning-rate schedules (torch-free): the interface a scheduler plugin implements
// (evaluated at every optimizer step), the linear warm-up that any schedule can put in front of
// itself, and the rule that scales lr to the global batch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

struct ScheduleContext {
  double baseLr = 0.1;  // already scaled to the global batch
  std::int64_t stepsPerEpoch = 1;
  std::int64_t totalSteps = 1;  // optimizer steps of the whole run
  std::int64_t startStep = 0;   // the first step this schedule governs (after a warm-up in front of it)
};

class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  // Learning rate of optimizer step `step` (0-based).
  virtual double lr(std::int64_t step) const = 0;
  // Momentum (SGD) or beta1 (Adam) of the step, for schedules that cycle it; nullopt: leave it.
  virtual std::optional<double> momentum(std::int64_t /*step*/) const { return std::nullopt; }
};

// The warm-up options: warmup_epochs, warmup_steps (wins when > 0), warmup_start_factor; and
// step_per: "step" (the learning rate changes at every optimizer step, timm's default) or "epoch"
// (once an epoch, as torchvision's reference script and torch.optim.lr_scheduler stepped per
// epoch do: the schedule and its warm-up are laid out in whole epochs, and step s uses the value of
// epoch s / steps_per_epoch).
struct WarmupSettings {
  double epochs = 0.0;
  std::int64_t steps = 0;
  double startFactor = 0.1;
  std::string stepPer = "step";
  std::int64_t length(const ScheduleContext& ctx) const;  // in the context's steps
};
const OptionTable<WarmupSettings>& warmupOptions();
// A schedule's own options followed by the warm-up's.
OptionDecls withWarmupOptions(OptionDecls own);
// A linear warm-up from warmup_start_factor × lr to lr, then the schedule that `after` builds for
// the remaining steps (its context's startStep is the warm-up's length). With step_per: epoch both
// are built in epoch units (a context of one step an epoch) and held for each epoch's steps.
std::unique_ptr<LrSchedule> withWarmup(const Options& o, const ScheduleContext& ctx,
                                       const std::function<std::unique_ptr<LrSchedule>(const ScheduleContext&)>& after);

// Learning-rate scaling rule of the optimizers: lr is given for base_batch samples.
double scaleLearningRate(double lr, std::int64_t baseBatch, std::int64_t globalBatch, const std::string& rule);

}  // namespace exprun
