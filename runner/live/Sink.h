// Purpose: what a run tells its outputs while it runs (Composer's callbacks, Lightning's loggers):
// a Sink receives plain values — each step's figures once they are read from the device, the
// progress line, the evaluations, the epochs' records — and writes them somewhere (log lines, the
// progress bar, the per-step CSV, TensorBoard events, the result file). A sink holds no reference
// to the model, the optimizer or the data, and nothing it does can change training. The loop
// reaches its sinks through Outputs (runner/live/Outputs.h). Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "runner/results/ResultFile.h"

namespace exprun {

// What the sinks know of the run from the start.
struct RunInfo {
  std::string name;
  std::int64_t epochs = 0, stepsPerEpoch = 0, totalSteps = 0, globalBatch = 0;
  int worldSize = 1;
  std::int64_t firstStep = 0;  // where this attempt starts (a resumed run: its checkpoint's step)
  std::string unit = "img";          // what throughput counts: "img", or "tokens" (the task's)
  std::int64_t unitsPerSample = 1;   // tokens: a sample's sequence length
};

// One optimizer step, as the per-step files record it.
struct StepRecord {
  std::int64_t step = 0, epoch = 0;  // step: optimizer steps done
  double loss = 0;                   // mean over the global batch (summed over the ranks)
  double lr = 0, imagesPerS = 0, gradNorm = 0, lossScale = 1;  // imagesPerS: the task's units per second
  bool tokens = false;                  // those units are tokens: named tokens_per_s in the CSV and trackers
  double dataWaitS = 0, commWaitS = 0;  // this step's
  double runSeconds = 0;                // run clock after the step
  double wallTime = 0;                  // seconds since the Unix epoch (TensorBoard's wall_time)
  PhaseSeconds phases{};                // this step's breakdown, as reported (output.step_breakdown)
};

// Where the run is, for the progress line (every train.log_every steps) and the progress bar.
struct ProgressReport {
  std::int64_t epoch = 0, stepsInEpoch = 0, step = 0;
  double loss = 0, lr = 0, imagesPerS = 0, etaS = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void step(const StepRecord&) {}
  virtual void progress(const ProgressReport&) {}  // the progress line
  virtual void status(const ProgressReport&) {}    // the progress bar, a few times a second
  virtual void evaluation(const EvalRecord&) {}
  virtual void epochEnds(const EpochRecord&, std::int64_t /*step*/) {}
  virtual void flush() {}   // writes what it buffered
  virtual void finish() {}  // the run is over
};

}  // namespace exprun
