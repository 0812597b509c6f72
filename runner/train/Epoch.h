// Purpose: one epoch of one rank — its batch loader (from the micro-batch a resumed run stopped
// at), clock (the device's time) and meters while it runs, the sums the steps keep on the device
// read only when progress() is asked for — and the end of an epoch: the meters reduced over the
// ranks by name (times and waits: the slowest rank's; samples and losses: summed), evaluation
// (and of the EMA weights), peak memory per rank, bad images skipped, as one EpochRecord.
#pragma once

#include <functional>
#include <optional>

#include "runner/data/BatchLoader.h"
#include "runner/live/Outputs.h"
#include "runner/metrics/Meters.h"
#include "runner/metrics/Phases.h"
#include "runner/results/ResultFile.h"
#include "runner/step/Feed.h"
#include "runner/step/Position.h"
#include "runner/step/Step.h"
#include "runner/train/Setup.h"

namespace exprun {

class EpochRun {
 public:
  // Epoch `at.position.epoch`, from position `at.position.sample` of its order (this rank's
  // micro-batch `at.position.micro`); `at.meters` are the epoch's meters so far (zero unless
  // resumed mid-epoch). Resets the device's peak memory.
  EpochRun(TrainSetup& s, const Progress& at);
  // Micro-batches in the epoch (of this rank): those consumed before `at`, and those left.
  std::int64_t microBatches() const;
  // The position in the epoch's order once this rank has consumed `micro` micro-batches
  // (TrainPosition::sample).
  std::int64_t samplePosition(std::int64_t micro) const;
  // The next micro-batch (for TrainStep::run).
  std::function<Batch()> batches();
  // After an optimizer step over `microBatches` micro-batches: the position moves on, the step is counted.
  void stepped(TrainPosition& pos, std::int64_t microBatches);
  // The step just made, for the live outputs (`loss`: TrainStep::lastLoss).
  StepSample sample(const TrainPosition& pos, double lr, double runSeconds, const torch::Tensor& loss) const;
  EpochMeters& meters() { return meters_; }
  const EpochMeters& meters() const { return meters_; }
  StepSums& sums() { return sums_; }
  const StepSums& sums() const { return sums_; }
  // Seconds waited for batches in the epoch so far (host-side; does not wait for the device).
  double dataWaitSoFar() const;
  // Leaves `seconds` (an evaluation inside the epoch) out of the epoch's training time.
  void exclude(double seconds) { meters_.elapsed -= seconds; }
  // Position and meters as of now: the device's sums, clock, data wait and skipped images
  // included (for a log line, a checkpoint, and the end of the epoch). Waits for the device.
  Progress progress(const TrainPosition& position) const;
  // Bad images the data plugin replaced since the epoch began (training and evaluation).
  std::int64_t skippedImages() const;
  // Images the data plugin decoded on the host instead of the device since this run of the epoch began.
  std::int64_t hostDecodedImages() const { return s_.data->hostDecodedSamples() - hostDecodedBefore_; }
  // Where this epoch run's loader workers spent their time so far.
  LoaderTimes loaderTimes() const { return loader_->times(); }
  // The epoch's peak memory, training steps and evaluations apart.
  PhasePeaks& peaks() { return peaks_; }
  // This rank's seconds in each phase of the epoch so far (a resumed epoch's earlier attempt
  // included; on a GPU, waits for the device).
  PhaseSeconds phasesSoFar() const;
  PhaseClock& phaseClock() { return phases_; }

 private:
  TrainSetup& s_;
  std::int64_t skippedBefore_;  // the data plugin's skipped-sample count when the epoch began
  std::int64_t hostDecodedBefore_;  // and its host-decoded count (data.decode: gpu; from a resume on)
  std::int64_t firstMicro_;  // the micro-batch the epoch run starts at
  EpochMeters meters_;  // those known on the host (samples, communication); the sums: sums_
  StepSums sums_;
  PhasePeaks peaks_;                   // resets the device's peaks
  std::optional<BatchLoader> loader_;  // made in the constructor's body: after the memory reset
  std::optional<DeviceFeed> feed_;     // the loader's batches onto the device (declared after it: goes first)
  DeviceClock clock_;
  mutable PhaseClock phases_;  // the step breakdown (reading it on a GPU resolves its events)
  ActivePhaseClock activePhases_{&phases_};
};

// The epoch's record: collective (every rank calls it at the epoch's end). `lr`: the last step's.
// `evaluated`: an evaluation just made at this position (not repeated); otherwise one is made.
// Achieved FLOP/s and MFU from the set-up's counted FLOPs per image and peak. The step breakdown
// covers the epoch run up to the end of its evaluation.
EpochRecord endEpoch(TrainSetup& s, EpochRun& run, const TrainPosition& position, double lr, Dist& dist,
                     const std::optional<EvalResult>& evaluated = std::nullopt);

}  // namespace exprun
