// Purpose: the training loop (see Trainer.h).
#include "runner/train/Trainer.h"

#include <csignal>
#include <ctime>

#include <algorithm>
#include <random>

#include "runner/checkpoint/Export.h"
#include "runner/live/Outputs.h"
#include "runner/metrics/Meters.h"
#include "runner/metrics/Phases.h"
#include "runner/step/Device.h"
#include "runner/train/Context.h"
#include "runner/train/Epoch.h"
#include "runner/train/Evaluations.h"
#include "runner/train/Profile.h"
#include "runner/train/Provenance.h"
#include "runner/util/Log.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::atomic<int>& stopSignal() {
  static std::atomic<int> sig{0};
  return sig;
}

namespace {

// The signals in the order a disagreement is settled: a requeue (SIGUSR1) wins over a stop.
int signalRank(int sig) { return sig == SIGUSR1 ? 3 : sig == SIGTERM ? 2 : sig == SIGINT ? 1 : 0; }
int signalOfRank(int rank) { return rank == 3 ? SIGUSR1 : rank == 2 ? SIGTERM : rank == 1 ? SIGINT : 0; }

// A stop request on any rank stops every rank at the same step, with the signal they agree on (0:
// no stop). Agreeing is a collective the host waits for: on a GPU the ranks agree every 10 steps,
// so that steps do not wait for the device.
int stopRequestedOnAnyRank(Dist& dist, std::int64_t step, bool gpu) {
  const int mine = stopRequested().load() ? std::max(1, signalRank(stopSignal().load())) : 0;
  if (!dist.active()) return signalOfRank(mine);
  if (gpu && step % 10 != 0) return 0;
  const int agreed = static_cast<int>(dist.max({static_cast<double>(mine)})[0]);
  return signalOfRank(agreed);
}

// One run: its set-up, where it stands, and what it reports to.
class Run {
 public:
  Run(const Spec& spec, Dist& dist, const ResumeRequest& resume, const std::string& resultPath,
      const StopStatus& stopStatus, const std::string& slurmJob);
  TrainOutcome train();
  // For the message of a failed collective: the step it failed in, and how to resume.
  std::string where() const;
  std::string howToResume() const;

 private:
  // Trains the epoch `at_` stands in; false when a stop was requested (after a checkpoint, if on).
  bool trainEpoch();
  // Its steps, until the epoch's end, the run's last step, a target met or a stop request.
  void runSteps(EpochRun& epoch, double& lr);
  void endEpoch(EpochRun& epoch, double lr);
  void addEpochEndSave(double seconds);
  // Where training stands, for a checkpoint: the device's sums, the files' sizes, the run clock.
  Progress standingNow(EpochRun& epoch);
  // What the run's checkpoints save and restore (runner/checkpoint/Checkpoint.h).
  CheckpointContent checkpointContent();
  double clock() const { return earlier_ + runClock_.seconds(); }
  bool finished() const;

  Stopwatch runClock_;  // the run starts (MLPerf's run_start) before set-up: loading data counts
  Dist& dist_;
  RunPaths paths_;
  Checkpointer checkpointer_;
  TrainSetup s_;
  ResultFile result_;
  TrainContext context_;  // what the methods see of the run
  Progress at_;         // the position, and this rank's meters of the epoch in progress
  double earlier_ = 0;  // the run clock of earlier attempts
  TrainStep step_;
  std::unique_ptr<Outputs> outputs_;
  std::unique_ptr<Evaluations> evals_;
  ProfileWindow profile_;
  bool interrupted_ = false;
  int stopSignal_ = 0;  // agreed by all ranks
  StopStatus stopStatus_;
  // This attempt's entry of the result file's attempts: where it stands (before a save, at the end).
  void noteAttempt();
  // train.profile: the window's figures and the per-module table, into the result file (rank 0).
  void profileFindings();
};

// The checkpoint's collectives run before the set-up: the group needs its device first.
const Spec& onDevice(const Spec& spec, Dist& dist) {
  dist.setDevice(chooseDevice(spec, dist.env()));
  return spec;
}

// The checkpoint to resume from is read first: saved by another number of ranks, it decides the
// accumulation the run is set up with.
Run::Run(const Spec& spec, Dist& dist, const ResumeRequest& resume, const std::string& resultPath,
         const StopStatus& stopStatus, const std::string& slurmJob)
    : dist_(dist),
      paths_(RunPaths::ofResultFile(spec, resultPath)),
      checkpointer_(onDevice(spec, dist), dist, paths_, resume),
      s_(setUp(checkpointer_.specToTrain(spec), dist, dist.device())),  // the device onDevice chose
      context_(s_, dist, paths_, result_),
      step_(s_.learner, s_.spec().train.numerics, s_.spec().train.rules, dist, s_.settings.device, &s_.methods),
      profile_(s_.spec().train.profile,
               paths_.writes() ? paths_.trace(dist.rank()) : "",
               s_.settings.device) {
  result_.name = s_.spec().name;
  result_.spec = s_.spec().toJson();
  result_.provenance = s_.provenance.toJson();
  log::info(s_.table());
  if (s_.spec().train.execution.cudaGraph) step_.useCudaGraph();  // checked by setUp (whyNoCudaGraph)
  s_.methods.each([&](const std::string&, Method& m) { m.setUp(context_); });
  if (auto restored = checkpointer_.begin(checkpointContent(), result_)) {
    if (restored->change && restored->change->forced) s_.continueInNewSteps(*restored);
    at_ = restored->progress;
    static_cast<RunHistory&>(result_) = restored->history;
    if (restored->change) result_.worldSizeChanges.push_back(*restored->change);
    // An attempt still "running" at its last save ended without a word (killed, a node lost): it
    // counts up to that save.
    if (!result_.attempts.empty() && result_.attempts.back().ended == "running") result_.attempts.back().ended = "killed";
  }
  if (!s_.spec().output.mlflow.trackingUri.empty() && result_.mlflowRunKey.empty()) {
    std::random_device rd;
    result_.mlflowRunKey = strf("%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  }
  stopStatus_ = stopStatus;
  Attempt now;
  now.number = static_cast<int>(result_.attempts.size()) + 1;
  now.startedAt = isoNow();
  now.fromStep = at_.position.step;
  now.toStep = at_.position.step;
  now.slurmJob = slurmJob;
  result_.attempts.push_back(now);
  s_.methods.each([&](const std::string&, Method& m) { m.begin(context_); });
  result_.methods = s_.methods.figures();
  earlier_ = at_.position.runSeconds;
  outputs_ = std::make_unique<Outputs>(s_.runInfo(at_.position.step), s_.spec().output, paths_, result_, dist,
                                       at_.position);
  evals_ = std::make_unique<Evaluations>(s_, dist, result_, *outputs_, [this] { return clock(); });
}

// Done when the steps are; but an epoch resumed after its last step (micro > 0) still needs its
// end (evaluation, record) when the checkpoint was taken before that.
bool Run::finished() const {
  const TrainPosition& p = at_.position;
  return p.epoch > s_.spec().train.length.epochs || (p.step >= s_.settings.totalSteps && p.micro == 0);
}

TrainOutcome Run::train() {
  s_.learner.model->train();
  while (!finished() && !evals_->stop())
    if (!trainEpoch()) break;
  if (profile_.on()) profileFindings();
  if (!interrupted_) s_.methods.each([&](const std::string&, Method& m) { m.afterTraining(context_); });
  result_.methods = s_.methods.figures();
  if (!interrupted_) result_.status = "completed";  // a stop's status is set before its checkpoint
  result_.attempts.back().ended = result_.status;
  noteAttempt();
  evals_->logTarget();
  outputs_->finish();
  if (dist_.rank() == 0 && paths_.writes() && s_.spec().output.saveWeights) saveWeights(*s_.learner.model, paths_.weights());
  dist_.barrier();
  return TrainOutcome{nlohmann::json(result_), interrupted_, stopSignal_, result_.status, s_.learner.model};
}

void Run::noteAttempt() {
  Attempt& a = result_.attempts.back();
  a.toStep = at_.position.step;
  a.seconds = runClock_.seconds();
}

bool Run::trainEpoch() {
  const TrainPosition& at = at_.position;
  s_.methods.each([&](const std::string&, Method& m) { m.beforeEpoch(context_, at.epoch, at.micro == 0); });
  EpochRun epoch(s_, at_);
  outputs_->epochBegins(at_.meters, clock());
  const TrainPosition& pos = at_.position;
  double lr = pos.step > 0 ? s_.schedule->lr(pos.step - 1) : s_.settings.batch.lr;  // the last step's (resuming at an epoch's end)
  runSteps(epoch, lr);
  step_.verify(pos.step);
  if (interrupted_) {
    // The status first: the stop's checkpoint carries it (a requeued attempt says so when resumed).
    std::string status = "interrupted";
    if (stopStatus_ && dist_.rank() == 0) status = stopStatus_(stopSignal_);
    result_.status = status;
    result_.attempts.back().ended = status;
    // A requeue saves even where checkpoints are off: the next attempt resumes from it. (Every
    // rank takes part in the save: rank 0's decision is shared.)
    const bool requeue = dist_.max({status == "requeued" ? 1.0 : 0.0})[0] > 0;
    checkpointer_.onStop(standingNow(epoch), requeue);
    return false;
  }
  endEpoch(epoch, lr);
  return true;
}

void Run::runSteps(EpochRun& epoch, double& lr) {
  TrainPosition& pos = at_.position;
  const std::int64_t logEvery = s_.spec().train.execution.logEvery;
  while (pos.step < s_.settings.totalSteps && pos.micro < epoch.microBatches()) {
    if (const int sig = stopRequestedOnAnyRank(dist_, pos.step, s_.settings.device.is_cuda())) {
      interrupted_ = true;
      stopSignal_ = sig;
      return;
    }
    const std::int64_t group = std::min(s_.settings.batch.accumulate, epoch.microBatches() - pos.micro);
    lr = s_.applySchedule(pos.step);
    const std::int64_t index = pos.step;
    profile_.beforeStep(index);
    step_.run(epoch.batches(), group, pos.step, pos.epoch, epoch.sums(), epoch.meters(), pos);
    epoch.phaseClock().stepEnds();
    profile_.afterStep(index);
    epoch.stepped(pos, group);
    // The epoch's last step, or the run's (train.max_steps inside an epoch): the epoch's end evaluates.
    const bool last = pos.micro == epoch.microBatches() || pos.step >= s_.settings.totalSteps;
    if (outputs_->recording()) outputs_->afterStep(epoch.sample(pos, lr, clock(), step_.lastLoss()));
    if (logEvery > 0 && (epoch.meters().steps % logEvery == 0 || last)) {
      step_.verify(pos.step);
      outputs_->progressLine(epoch.progress(pos), lr, clock());  // waits for the device before the clock is read
    }
    if (evals_->dueAfter(pos.step, last)) {
      step_.verify(pos.step);
      if (evals_->inEpoch(epoch, pos)) return;  // the target met
    }
    {
      PhaseScope saving(Phase::Checkpoint);
      checkpointer_.afterStep(pos.step, [&] { return standingNow(epoch); });
    }
    faultPoint("step", pos.step, dist_.rank());
  }
}

void Run::endEpoch(EpochRun& epoch, double lr) {
  TrainPosition& pos = at_.position;
  EpochRecord record = exprun::endEpoch(s_, epoch, pos, lr, dist_, evals_->stoppedInEpoch());
  record.partial = evals_->stoppedInEpoch().has_value();
  s_.methods.each([&](const std::string&, Method& m) { m.afterEpoch(context_, record); });
  evals_->atEpochEnd(record, pos);
  result_.epochs.push_back(record);
  result_.methods = s_.methods.figures();
  outputs_->epochEnds(record, pos.step);
  // On to the next epoch, with fresh meters (the skipped-step counts run on).
  at_.beginNextEpoch(s_.learner.scaler->skippedSteps(), clock());
  const OutputSizes sizes = outputs_->flush();
  pos.csvBytes = sizes.csvBytes;
  pos.eventBytes = sizes.eventBytes;
  if (!evals_->stop()) {
    Stopwatch saving;
    noteAttempt();
    checkpointer_.afterEpoch(record.epoch, at_);
    addEpochEndSave(saving.seconds());
  }
}

// The checkpoint saved at an epoch's end is made after its record (which it holds): its seconds
// join the record's breakdown afterwards (the result file has them from its next write on; the
// checkpoint's copy of the record does not).
void Run::addEpochEndSave(double seconds) {
  if (!phaseBreakdownOn()) return;  // the same on every rank (the environment)
  EpochBreakdown& b = result_.epochs.back().breakdown;
  const double most = dist_.max({seconds})[0];
  const double mean = dist_.sum({seconds})[0] / std::max(1, dist_.worldSize());
  const auto k = static_cast<std::size_t>(Phase::Checkpoint);
  b.max[k] += most;
  b.mean[k] += mean;
  b.epochS += most;
  b.meanEpochS += mean;
}

void Run::profileFindings() {
  const ProfileConfig& c = s_.spec().train.profile;
  if (!profile_.done()) {
    if (dist_.rank() == 0)
      log::warn(strf("train.profile: the window (steps %lld-%lld) was not reached: no profile", static_cast<long long>(c.startStep + 1),
                     static_cast<long long>(c.startStep + c.steps)));
    return;
  }
  if (dist_.rank() != 0) return;
  result_.profile = profile_.figures();
  const DataInfo info = s_.data->info();
  std::shared_ptr<Model> model = context_.freshModel();
  const double peak = s_.measures.peakFlopsPerS / std::max(1, dist_.worldSize());  // one device's
  const ModuleTable t = moduleTable(*model, s_.settings.device, s_.settings.batch.microBatch, info.channels, info.height,
                                    info.width, peak, autocastDtype(s_.spec().train.numerics.precision));
  log::info(formatModuleTable(t));
  result_.profile["modules"] = moduleTableJson(t);
}

std::string Run::where() const {
  const TrainPosition& p = at_.position;
  return strf("step %lld (epoch %lld)", static_cast<long long>(p.step + 1), static_cast<long long>(p.epoch));
}

std::string Run::howToResume() const {
  const std::string ckpt = checkpointer_.newest();
  if (ckpt.empty())
    return "No checkpoint was committed (output.checkpoint): running the same command again starts over.";
  return "To resume, run the same command again with --resume auto (a requeued Slurm job or a restarted launch "
         "does so by itself): it continues from the newest checkpoint, " + ckpt + ".";
}

CheckpointContent Run::checkpointContent() {
  CheckpointContent c;
  c.spec = &s_.spec();
  c.data = s_.data->info();
  c.learner = &s_.learner;
  c.device = s_.settings.device;
  c.batch = s_.settings.batch;
  c.planned = s_.settings.plan.has_value();
  c.methods = &s_.methods;
  c.context = &context_;
  return c;
}

Progress Run::standingNow(EpochRun& epoch) {
  step_.verify(at_.position.step);
  noteAttempt();
  Progress now = epoch.progress(at_.position);
  now.position.runSeconds = clock();
  const OutputSizes sizes = outputs_->flush();
  now.position.csvBytes = sizes.csvBytes;
  now.position.eventBytes = sizes.eventBytes;
  return now;
}

}  // namespace

TrainOutcome Trainer::run(const std::string& resultPath) {
  Dist single;
  Dist& dist = dist_ ? *dist_ : single;
  std::unique_ptr<Run> run;
  try {
    run = std::make_unique<Run>(spec_, dist, resume_, resultPath, stopStatus_, slurmJob_);
    return run->train();
  } catch (const c10::OutOfMemoryError& e) {
    // On a GPU the allocator's state at the failure goes beside the result file, named in the error.
    if (resultPath.empty()) throw;
    const std::string path = RunPaths::ofResultFile(spec_, resultPath).oomSnapshot(dist.rank());
    bool written = false;
    try {
      written = writeCudaMemorySnapshot(path);
    } catch (const std::exception& w) {
      log::warn(std::string("the allocator's snapshot could not be written: ") + w.what());
    }
    if (!written) throw;
    throw std::runtime_error(std::string(e.what()) + " [the CUDA allocator's snapshot at the failure: " + path +
                             " (segments and blocks, allocated or free)]");
  } catch (const std::exception& e) {
    // A collective of the formed group that timed out or lost a peer (the backend's own error,
    // thrown out of a wait): said plainly, with its own exit code.
    if (!dist.active() || dist.failedCollective().empty() || dynamic_cast<const DistError*>(&e) ||
        dynamic_cast<const CheckpointError*>(&e))
      throw;
    const std::string error = dynamic_cast<const c10::Error*>(&e) ? static_cast<const c10::Error&>(e).what_without_backtrace()
                                                                  : e.what();
    std::string msg = dist.diagnoseFailure(error, run ? run->where() : "the set-up", spec_.distributed.timeoutS);
    msg += ". " + (run ? run->howToResume() : std::string("Running the same command again starts over."));
    throw CollectiveError(msg);
  }
}

}  // namespace exprun
