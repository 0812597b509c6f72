// Purpose: setting up a run, the verb before the training loop. What it makes comes apart by how
// long it holds: RunSettings (fixed once set up), RunMeasures (measured at set-up), the parts it
// builds (the data, the learner, the schedule, the methods) and the little that changes while the
// run goes. setUp() makes them in that order, one statement each.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "runner/api/Method.h"
#include "runner/api/Schedule.h"
#include "runner/checkpoint/Checkpoint.h"
#include "runner/data/BatchLoader.h"
#include "runner/live/Sink.h"
#include "runner/metrics/Flops.h"
#include "runner/plan/Planner.h"
#include "runner/step/Learner.h"
#include "runner/train/Provenance.h"

namespace exprun {

// Fixed once set up: the spec as trained, the device and threads, the batching and the learning
// rate scaled to it, the steps, the loaders' options, the comm hook's name.
struct RunSettings {
  Spec spec;  // as trained: with the memory plan applied
  torch::Device device{torch::kCPU};
  int threads = 1;
  std::optional<MemoryPlan> plan;  // batch_size: auto
  BatchShape batch;                // micro-batch, accumulation, global batch, steps per epoch, scaled lr
  std::int64_t totalSteps = 0;
  LoaderOptions trainLoader, evalLoader;
  std::string hookName;  // the comm hook ("none" for a single process)
  bool bytesInput = false;  // batches cross as uint8 pixels, normalised on the device (train.input)
};

// Measured at set-up: the FLOPs a step counts per image (recounted when a method changes the
// model's shapes) and the devices' peak, with the provenance that the start-up table and the result
// file share.
struct RunMeasures {
  StepFlops flops;              // counted per image for one training step (recomputation not included)
  double peakFlopsPerS = 0;     // the peak of all ranks' devices together, for the run's precision
  std::string peakSource;       // how the peak was worked out (the rule, or what was measured)
  bool precisionNative = true;  // the device has arithmetic for the run's precision
  std::string precisionMissing;  // what it would need, where it has not
};

// A set-up run: its settings and measures; what it built — the data (loaded), the learner (model,
// optimizer, scaler, EMA, reducer), the learning-rate schedule, the spec's methods; and the little
// that changes while the run goes (a warning given once).
struct TrainSetup {
  RunSettings settings;
  RunMeasures measures;
  std::unique_ptr<Dataset> data;
  Learner learner;
  std::unique_ptr<LrSchedule> schedule;
  Methods methods;
  Provenance provenance;
  bool warnedAbovePeak = false;  // an MFU above 100 % was warned about

  const Spec& spec() const { return settings.spec; }
  // Sets the learning rate (and the momentum, for schedules that cycle it) of optimizer step
  // `step` (0-based); returns the learning rate.
  double applySchedule(std::int64_t step);
  // The start-up table (rank 0 logs it): the resolved spec, then the provenance.
  std::string table() const;
  // What the live outputs know of the run (runner/live/Sink.h); `firstStep`: where training starts.
  RunInfo runInfo(std::int64_t firstStep) const;
  // A resumption with another global batch (--force) counts steps of the new size: the epoch's
  // steps done become its steps per epoch less those the rest of the epoch takes on this run's
  // ranks, so the epoch ends at a whole number of steps and later ones line up with the schedule.
  void continueInNewSteps(Restored& restored) const;
};

// Throws SpecError-like std::invalid_argument (bad option combinations), DataError, DistError.
TrainSetup setUp(const Spec& spec, Dist& dist, const torch::Device& device);
// The same on the device the spec and the environment choose (chooseDevice).
TrainSetup setUp(const Spec& spec, Dist& dist);

}  // namespace exprun
