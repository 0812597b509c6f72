// Purpose: the training loop (see Trainer.h).
#include "runner/train/Trainer.h"

#include <algorithm>
#include <filesystem>

#include "runner/checkpoint/Export.h"
#include "runner/live/Outputs.h"
#include "runner/metrics/Meters.h"
#include "runner/step/Device.h"
#include "runner/train/Compression.h"
#include "runner/train/Epoch.h"
#include "runner/train/Evaluations.h"
#include "runner/util/Log.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

namespace {

// A stop request on any rank stops every rank at the same step. Agreeing is a collective the host
// waits for: on a GPU the ranks agree every 10 steps, so that steps do not wait for the device.
bool stopRequestedOnAnyRank(Dist& dist, std::int64_t step, bool gpu) {
  if (!dist.active()) return stopRequested().load();
  if (gpu && step % 10 != 0) return false;
  return dist.max({stopRequested().load() ? 1.0 : 0.0})[0] > 0;
}

// One run: its set-up, where it stands, and what it reports to.
class Run {
 public:
  Run(const Spec& spec, Dist& dist, const ResumeRequest& resume, const std::string& resultPath);
  TrainOutcome train();

 private:
  // Trains the epoch `at_` stands in; false when a stop was requested (after a checkpoint, if on).
  bool trainEpoch();
  // Its steps, until the epoch's end, the run's last step, a target met or a stop request.
  void runSteps(EpochRun& epoch, double& lr);
  void endEpoch(EpochRun& epoch, double lr);
  // Where training stands, for a checkpoint: the device's sums, the files' sizes, the run clock.
  Standing standingNow(EpochRun& epoch);
  double clock() const { return earlier_ + runClock_.seconds(); }
  bool finished() const;

  Stopwatch runClock_;  // the run starts (MLPerf's run_start) before set-up: loading data counts
  Dist& dist_;
  std::string resultPath_;
  Checkpointer checkpointer_;
  TrainSetup s_;
  ResultFile result_;
  Standing at_;         // the position, and this rank's meters of the epoch in progress
  double earlier_ = 0;  // the run clock of earlier attempts
  TrainStep step_;
  std::unique_ptr<Outputs> outputs_;
  std::unique_ptr<Evaluations> evals_;
  bool interrupted_ = false;
};

std::string outDirOf(const Spec& spec, const std::string& resultPath) {
  return resultPath.empty() ? spec.output.dir : std::filesystem::path(resultPath).parent_path().string();
}

// The checkpoint's collectives run before the set-up: the group needs its device first.
const Spec& onDevice(const Spec& spec, Dist& dist) {
  dist.setDevice(chooseDevice(spec, dist.env()));
  return spec;
}

// The checkpoint to resume from is read first: saved by another number of ranks, it decides the
// accumulation the run is set up with.
Run::Run(const Spec& spec, Dist& dist, const ResumeRequest& resume, const std::string& resultPath)
    : dist_(dist),
      resultPath_(resultPath),
      checkpointer_(onDevice(spec, dist), dist, outDirOf(spec, resultPath), resume),
      s_(setUp(checkpointer_.specToTrain(spec), dist)),
      step_(s_.parts, s_.spec.train.numerics, s_.spec.train.rules, dist, s_.device) {
  result_.name = s_.spec.name;
  result_.spec = s_.spec.toJson();
  result_.provenance = s_.provenance.toJson();
  log::info(s_.table());
  if (auto restored = checkpointer_.begin(s_.checkpointContent(), result_)) {
    if (restored->change && restored->change->forced) s_.continueInNewSteps(*restored);
    at_ = restored->standing;
    result_.epochs = restored->resultEpochs;
    result_.evals = restored->resultEvals;
    result_.worldSizeChanges = restored->worldSizeChanges;
    result_.prunes = restored->resultPrunes;
    if (restored->change) result_.worldSizeChanges.push_back(*restored->change);
  }
  earlier_ = at_.position.runSeconds;
  outputs_ = std::make_unique<Outputs>(s_.runInfo(at_.position.step), s_.spec.output, resultPath, result_, dist,
                                       at_.position);
  evals_ = std::make_unique<Evaluations>(s_, dist, result_, *outputs_, [this] { return clock(); });
}

// Done when the steps are; but an epoch resumed after its last step (micro > 0) still needs its
// end (evaluation, record) when the checkpoint was taken before that.
bool Run::finished() const {
  const TrainPosition& p = at_.position;
  return p.epoch > s_.spec.train.length.epochs || (p.step >= s_.totalSteps && p.micro == 0);
}

TrainOutcome Run::train() {
  s_.parts.model->train();
  while (!finished() && !evals_->stop())
    if (!trainEpoch()) break;
  if (!interrupted_) result_.compression = compareModels(s_, dist_, result_, resultPath_);
  result_.status = interrupted_ ? "interrupted" : "completed";
  evals_->logTarget();
  outputs_->finish();
  if (dist_.rank() == 0 && !resultPath_.empty() && s_.spec.output.saveWeights)
    saveWeights(*s_.parts.model, resultPath_.substr(0, resultPath_.size() - 5) + ".weights.pt");
  dist_.barrier();
  return TrainOutcome{nlohmann::json(result_), interrupted_, s_.parts.model};
}

bool Run::trainEpoch() {
  const TrainPosition& at = at_.position;
  if (s_.pruner && at.micro == 0)  // compress.prune: a pruning step before this epoch
    if (const int k = s_.pruner->stepBefore(at.epoch);
        k > 0 && std::none_of(result_.prunes.begin(), result_.prunes.end(), [&](const PruneRecord& p) { return p.step == k; })) {
      // (a checkpoint taken at the epoch's start after its step, on a stop request, has it already)
      const bool evaluated = s_.spec.train.evaluation.eval && !result_.epochs.empty();
      result_.prunes.push_back(
          pruneBeforeEpoch(s_, dist_, k, at.epoch, evaluated ? result_.epochs.back().valTop1 : -1.0));
    }
  if (const std::int64_t first = qatFirstEpoch(s_.spec); first > 0 && at.epoch >= first && !s_.fakeQuant)
    startFakeQuant(s_, dist_, at.epoch);  // compress.qat_epochs (a checkpoint taken after it restored it)
  EpochRun epoch(s_, at_);
  outputs_->epochBegins(at_.meters, clock());
  const TrainPosition& pos = at_.position;
  double lr = pos.step > 0 ? s_.schedule->lr(pos.step - 1) : s_.lr;  // the last step's (resuming at an epoch's end)
  runSteps(epoch, lr);
  step_.verify(pos.step);
  if (interrupted_) {
    checkpointer_.onStop(standingNow(epoch));
    return false;
  }
  endEpoch(epoch, lr);
  return true;
}

void Run::runSteps(EpochRun& epoch, double& lr) {
  TrainPosition& pos = at_.position;
  const std::int64_t logEvery = s_.spec.train.execution.logEvery;
  while (pos.step < s_.totalSteps && pos.micro < epoch.microBatches()) {
    if (stopRequestedOnAnyRank(dist_, pos.step, s_.device.is_cuda())) {
      interrupted_ = true;
      return;
    }
    const std::int64_t group = std::min(s_.accumulate, epoch.microBatches() - pos.micro);
    lr = s_.applySchedule(pos.step);
    step_.run(epoch.batches(), group, pos.step, pos.epoch, epoch.sums(), epoch.meters(), pos);
    epoch.stepped(pos, group);
    const bool last = pos.micro == epoch.microBatches();
    if (outputs_->recording()) outputs_->afterStep(epoch.sample(pos, lr, clock(), step_.lastLoss()));
    if (logEvery > 0 && (epoch.meters().steps % logEvery == 0 || last)) {
      step_.verify(pos.step);
      outputs_->progressLine(epoch.standing(pos), lr, clock());  // waits for the device before the clock is read
    }
    if (evals_->dueAfter(pos.step, last)) {
      step_.verify(pos.step);
      if (evals_->inEpoch(epoch, pos)) return;  // the target met
    }
    checkpointer_.afterStep(pos.step, [&] { return standingNow(epoch); });
    faultPoint("step", pos.step, dist_.rank());
  }
}

void Run::endEpoch(EpochRun& epoch, double lr) {
  TrainPosition& pos = at_.position;
  EpochRecord record = exprun::endEpoch(s_, epoch, pos, lr, dist_, evals_->stoppedInEpoch());
  record.partial = evals_->stoppedInEpoch().has_value();
  evals_->atEpochEnd(record, pos);
  result_.epochs.push_back(record);
  outputs_->epochEnds(record, pos.step);
  // On to the next epoch, with fresh meters (the skipped-step counts run on).
  at_.beginNextEpoch(s_.parts.scaler->skippedSteps(), clock());
  const OutputSizes sizes = outputs_->flush();
  pos.csvBytes = sizes.csvBytes;
  pos.eventBytes = sizes.eventBytes;
  if (!evals_->stop()) checkpointer_.afterEpoch(record.epoch, at_);
}

Standing Run::standingNow(EpochRun& epoch) {
  step_.verify(at_.position.step);
  Standing now = epoch.standing(at_.position);
  now.position.runSeconds = clock();
  const OutputSizes sizes = outputs_->flush();
  now.position.csvBytes = sizes.csvBytes;
  now.position.eventBytes = sizes.eventBytes;
  return now;
}

}  // namespace

TrainOutcome Trainer::run(const std::string& resultPath) {
  Dist single;
  Run run(spec_, dist_ ? *dist_ : single, resume_, resultPath);
  return run.train();
}

}  // namespace exprun
