// Purpose: the live outputs of a run as the training loop reaches them. The loop tells Outputs what
// happened — a step, a progress line due, an evaluation, an epoch's end — and Outputs tells the
// sinks rank 0 keeps (runner/live/Sinks.h: log lines, progress bar, per-step CSV, TensorBoard, the
// result file). A step's values stay on the device until a flush (an evaluation, a checkpoint, the
// epoch's end, every 256 steps, and the bar of a single process), so steps do not wait for it; with
// several ranks and per-step files, every rank keeps its steps' losses and the flushes — which
// every rank makes at the same steps — sum them over the ranks in one allreduce: the files'
// per-step loss is the mean over the global batch.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "runner/dist/Dist.h"
#include "runner/live/Mlflow.h"
#include "runner/live/Sinks.h"
#include "runner/spec/RunPaths.h"
#include "runner/spec/Sections.h"
#include "runner/step/Position.h"

namespace exprun {

// One optimizer step as the loop saw it: the epoch's cumulative figures so far (this rank's) and
// the device's values, read at the next flush.
struct StepSample {
  std::int64_t step = 0, epoch = 0, stepsInEpoch = 0, samples = 0;
  double lr = 0, dataWait = 0, commWait = 0, runSeconds = 0;
  PhaseSeconds phases{};    // the epoch's phases so far, as reported (output.step_breakdown only)
  torch::Tensor loss;       // this rank's loss sum and samples of the step (TrainStep::lastLoss)
  torch::Tensor normSum;    // the epoch's gradient norms so far (a copy)
  torch::Tensor lossScale;  // the loss scale after the step (a copy; undefined: 1)
};

// The sizes of rank 0's per-step files after a flush (-1: not kept), which a checkpoint records so
// that a resumed run cuts them back.
struct OutputSizes {
  std::int64_t csvBytes = -1, eventBytes = -1;
};

class Outputs {
 public:
  // `paths`: where rank 0 writes `result` (the run's) and the per-step files beside it (none when
  // the run writes no files). `start`: where training starts (a restored position:
  // the files are cut back to the sizes it recorded).
  // With output.mlflow, rank 0 also sends the run to MLflow (runner/live/Mlflow.h), its run id
  // kept in `result` (which the checkpoints hold).
  Outputs(const RunInfo& run, const OutputConfig& output, const RunPaths& paths, ResultFile& result, Dist& dist,
          const TrainPosition& start);
  // Whether afterStep wants the steps (a file, the bar or the shared losses need them).
  bool recording() const { return recording_; }
  // A new epoch run begins with the meters `at` (zero unless resumed mid-epoch), at run clock `runSeconds`.
  void epochBegins(const EpochMeters& at, double runSeconds);
  void afterStep(const StepSample& s);
  // The progress line (train.log_every) from the epoch's meters `now`, unless the bar shows it.
  void progressLine(const Progress& now, double lr, double runSeconds);
  void evaluation(const EvalRecord& e);
  void epochEnds(const EpochRecord& r, std::int64_t step);
  // Reads the buffered steps, hands them to the sinks and writes the files.
  OutputSizes flush();
  // The last flush; the bar taken off the screen; the result file written as it stands.
  void finish();

 private:
  struct Last {  // the cumulative figures the next step's differences start from
    double normSum = 0, dataWait = 0, commWait = 0, runSeconds = 0;
    std::int64_t samples = 0;
    PhaseSeconds phases{};
  };
  void drawBar(const StepSample& s);
  StepRecord recordOf(const StepSample& s, double lossSum, double samples, double normSum, double scale) const;

  RunInfo run_;
  Dist& dist_;
  bool shared_;     // several ranks and per-step files: the losses are summed over the ranks at flushes
  bool recording_;  // rank 0 with a file or bar to feed; every rank when shared_
  std::vector<std::unique_ptr<Sink>> sinks_;  // rank 0's, in the order they are told
  StepsCsv* csv_ = nullptr;                   // among sinks_, when kept
  TensorBoardEvents* events_ = nullptr;
  ProgressBar* bar_ = nullptr;
  MlflowSink* mlflow_ = nullptr;
  const ResultFile& result_;
  std::vector<StepSample> rows_;
  std::vector<double> rowWallTimes_;
  Last last_;
  double lastLoss_ = 0;       // the loss of the last flushed step (the bar's)
  double barDrawn_ = -1;      // run clock of the last bar
  double firstSeconds_ = -1;  // run clock at this attempt's first step
};

}  // namespace exprun
