// Purpose: the run's evaluations (see Evaluations.h).
#include "runner/train/Evaluations.h"

#include "runner/metrics/Phases.h"
#include "runner/util/Log.h"

namespace exprun {

Evaluations::Evaluations(TrainSetup& s, Dist& dist, ResultFile& result, Outputs& outputs, std::function<double()> clock)
    : s_(s), dist_(dist), result_(result), outputs_(outputs), clock_(std::move(clock)) {
  const Evaluation& e = s.spec().train.evaluation;
  result.target = Target{e.targetTop1, e.targetTop5, e.targetValLoss};
}

bool Evaluations::dueAfter(std::int64_t step, bool last) const {
  const Evaluation& e = s_.spec().train.evaluation;
  return e.eval && e.evalEverySteps > 0 && step % e.evalEverySteps == 0 && !last;
}

bool Evaluations::inEpoch(EpochRun& epoch, const TrainPosition& pos) {
  Stopwatch evaluating;
  PhaseScope phase(Phase::Eval);
  epoch.peaks().beginEvaluation();
  const EvalResult ev = evaluate(s_, dist_);
  epoch.peaks().endEvaluation();
  epoch.exclude(evaluating.seconds());
  if (record(pos, ev)) stoppedInEpoch_ = ev;
  return stop_;
}

void Evaluations::atEpochEnd(const EpochRecord& r, const TrainPosition& pos) {
  if (s_.spec().train.evaluation.eval && !stoppedInEpoch_) record(pos, EvalResult{r.valLoss, r.valTop1, r.valTop5});
}

void Evaluations::logTarget() const {
  if (const EvalRecord* hit = result_.targetReached())
    log::info(strf("target reached at step %lld (epoch %lld): val loss %.4f top1 %.2f%% top5 %.2f%%, %.1f s into "
                   "the run",
                   static_cast<long long>(hit->step), static_cast<long long>(hit->epoch), hit->valLoss, hit->valTop1,
                   hit->valTop5, hit->timeS));
}

bool Evaluations::record(const TrainPosition& pos, const EvalResult& ev) {
  const EvalRecord rec{pos.step, pos.epoch, clock_(), ev.loss, ev.top1, ev.top5};
  result_.evals.push_back(rec);
  outputs_.evaluation(rec);
  stop_ = s_.spec().train.evaluation.stopAtTarget && result_.targetReached() != nullptr;
  return stop_;
}

}  // namespace exprun
