// Purpose: what a run shows while it runs, on rank 0 — the progress line every train.log_every
// steps, or instead a progress bar redrawn in place when stderr is a terminal (EXPRUN_PROGRESS=0/1
// overrides); an evaluation's and an epoch's lines; the per-step metrics file <dir>/<name>.steps.csv
// (step, epoch, loss, lr, images/s, grad norm, loss scale, data wait, comm wait, run clock) and
// TensorBoard event files in <dir>/tensorboard/<name>/ (step scalars train/*, evaluations val/*,
// epoch figures epoch/*). A step's values stay on the device until a flush (an evaluation, a
// checkpoint, the epoch's end, every 256 steps, and the bar of a single process), so steps do not
// wait for it; with several ranks the flushes sum the step losses over the ranks.
// A resumed run cuts both files back to the sizes its checkpoint recorded: curves continue with
// no step twice. (Resumed with another global batch, --force, the epoch's step count restarts in
// steps of the new size: the CSV loses that epoch's rows after it; the event file keeps them.)
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runner/dist/Dist.h"
#include "runner/live/EventFile.h"
#include "runner/results/ResultFile.h"
#include "runner/train/Epoch.h"

namespace exprun {

class LiveMetrics {
 public:
  // `start`: where training starts (a restored position: its file sizes are kept, the rest cut).
  // `outDir`: the result file's folder; empty: no files (a run without a result file). With
  // several ranks and per-step files, every rank keeps its steps' losses and the flushes (which
  // every rank makes at the same steps) sum them over the ranks in one allreduce: the files'
  // per-step loss is the mean over the global batch.
  LiveMetrics(const TrainSetup& s, const std::string& outDir, Dist& dist, const TrainPosition& start);
  // A new EpochRun begins at `at` (its meters so far), at run clock `runSeconds`.
  void epochBegins(const Progress& at, double runSeconds);
  // After optimizer step pos.step (1-based count) of `epoch`, at run clock `runSeconds`; `loss`:
  // this rank's loss sum and sample count of the step (TrainStep::lastLoss).
  void afterStep(const EpochRun& epoch, const TrainPosition& pos, const torch::Tensor& loss, double lr,
                 double runSeconds);
  // The progress line (train.log_every) unless the bar shows it.
  void progressLine(const Progress& now, double lr, double runSeconds);
  void evaluation(const EvalRecord& e);
  void epochEnds(const EpochRecord& r, std::int64_t step);
  // Writes what is buffered; stores the files' sizes in `p` (for a checkpoint).
  void flush(TrainPosition* p = nullptr);
  // The last flush, and the bar taken off the screen.
  void finish();

 private:
  struct Row {  // one step, as recorded (cumulative figures of the epoch run; device sums)
    std::int64_t step, epoch, samples;
    double lr, dataWait, commWait, wallTime, runSeconds, lossScale;
    torch::Tensor loss, normSum;  // the step's loss sum and samples (this rank's); the epoch's gradient norms so far
  };
  struct Last {  // the cumulative figures the next row's differences start from
    double normSum = 0, dataWait = 0, commWait = 0, runSeconds = 0;
    std::int64_t samples = 0;
  };
  void drawBar(const EpochRun& epoch, const TrainPosition& pos, double runSeconds);

  const TrainSetup& s_;
  Dist& dist_;
  int rank_, world_;
  bool shared_;     // several ranks and per-step files: the losses are summed over the ranks at flushes
  bool recording_;  // rank 0 with a CSV, event file or bar to feed; every rank when shared_
  bool bar_;
  std::unique_ptr<AppendFile> csv_;
  std::unique_ptr<EventFile> events_;
  std::vector<Row> rows_;
  Last last_;
  double lastLoss_ = 0;          // the loss of the last flushed step (the bar's)
  double barDrawn_ = -1;         // run clock of the last bar
  std::int64_t firstStep_;       // where this attempt started (for the ETA)
  double firstSeconds_ = -1;     // run clock at this attempt's first step
};

// Whether rank 0 shows a progress bar: EXPRUN_PROGRESS=1/0, else when stderr is a terminal.
bool progressBarWanted();

}  // namespace exprun
