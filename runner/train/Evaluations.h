// Purpose: the run's evaluations on the test split — one at every epoch's end and, with
// train.eval_every_steps, inside epochs — each recorded on the run clock (the result file, the
// outputs) and checked against train.target_*: the run stops at the first one meeting the target
// unless train.stop_at_target is false (then the time to target is recorded and training goes on).
#pragma once

#include <functional>
#include <optional>

#include "runner/live/Outputs.h"
#include "runner/results/ResultFile.h"
#include "runner/train/Epoch.h"
#include "runner/train/Evaluate.h"
#include "runner/train/Setup.h"

namespace exprun {

class Evaluations {
 public:
  // `clock`: the run clock (seconds since the run started, earlier attempts included).
  Evaluations(TrainSetup& s, Dist& dist, ResultFile& result, Outputs& outputs, std::function<double()> clock);
  // Whether an evaluation inside the epoch is due after optimizer step `step` (1-based count; the
  // epoch's `last` step has the epoch's end's).
  bool dueAfter(std::int64_t step, bool last) const;
  // An evaluation inside the epoch, its time left out of the epoch's training time. True when the
  // run stops here.
  bool inEpoch(EpochRun& epoch, const TrainPosition& pos);
  // The evaluation that stopped the run inside the epoch (the epoch's end repeats none).
  const std::optional<EvalResult>& stoppedInEpoch() const { return stoppedInEpoch_; }
  // The epoch's end, with the evaluation endEpoch made.
  void atEpochEnd(const EpochRecord& r, const TrainPosition& pos);
  bool stop() const { return stop_; }
  // Logs where the target was reached, if it was.
  void logTarget() const;

 private:
  bool record(const TrainPosition& pos, const EvalResult& ev);

  TrainSetup& s_;
  Dist& dist_;
  ResultFile& result_;
  Outputs& outputs_;
  std::function<double()> clock_;
  bool stop_ = false;
  std::optional<EvalResult> stoppedInEpoch_;
};

}  // namespace exprun
