// Purpose: setting up a run, the verb before the training loop: threads and device, the memory
// plan (batch_size: auto), the data (loaded) and the parts of training, the batch loaders, the
// learning rate scaled to the global batch and its schedule over the run's steps, and the
// provenance that the start-up table and the result file share.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runner/api/Schedule.h"
#include "runner/checkpoint/Checkpoint.h"
#include "runner/compress/Prune.h"
#include "runner/compress/Quantize.h"
#include "runner/data/BatchLoader.h"
#include "runner/live/Sink.h"
#include "runner/metrics/Flops.h"
#include "runner/plan/Planner.h"
#include "runner/step/Parts.h"
#include "runner/train/Provenance.h"

namespace exprun {

struct TrainSetup {
  Spec spec;  // as trained: with the memory plan applied
  torch::Device device{torch::kCPU};
  int threads = 1;
  std::optional<MemoryPlan> plan;
  std::unique_ptr<Dataset> data;
  TrainParts parts;
  std::unique_ptr<ChannelPruner> pruner;  // compress.prune (null when it is none)
  std::unique_ptr<FakeQuantForward> fakeQuant;  // quantization-aware fine-tuning, once started (parts.forward)
  Dist* dist = nullptr;                   // the run's process group
  std::unique_ptr<LrSchedule> schedule;
  LoaderOptions trainLoader, evalLoader;
  std::int64_t microBatch = 0, accumulate = 1, globalBatch = 0;
  std::int64_t stepsPerEpoch = 0, totalSteps = 0;
  double lr = 0;         // scaled to the global batch
  std::string hookName;  // the comm hook ("none" for a single process)
  StepFlops flops;              // counted per image for one training step (recomputation not included)
  double peakFlopsPerS = 0;     // the peak of all ranks' devices together, for the run's precision
  std::string peakSource;       // how the peak was worked out (the rule, or what was measured)
  bool precisionNative = true;  // the device has arithmetic for the run's precision
  std::string precisionMissing;  // what it would need, where it has not
  bool warnedAbovePeak = false;  // an MFU above 100 % was warned about
  Provenance provenance;

  // Sets the learning rate (and the momentum, for schedules that cycle it) of optimizer step
  // `step` (0-based); returns the learning rate.
  double applySchedule(std::int64_t step);
  // The start-up table (rank 0 logs it): the resolved spec, then the provenance.
  std::string table() const;
  // What the run's checkpoints save and restore (runner/checkpoint/Checkpoint.h).
  CheckpointContent checkpointContent();
  // What the live outputs know of the run (runner/live/Sink.h); `firstStep`: where training starts.
  RunInfo runInfo(std::int64_t firstStep) const;
  // A resumption with another global batch (--force) counts steps of the new size: the epoch's
  // steps done become its steps per epoch less those the rest of the epoch takes on this run's
  // ranks, so the epoch ends at a whole number of steps and later ones line up with the schedule.
  void continueInNewSteps(Restored& restored) const;
};

// Throws SpecError-like std::invalid_argument (bad option combinations), DataError, DistError.
TrainSetup setUp(const Spec& spec, Dist& dist);

}  // namespace exprun
