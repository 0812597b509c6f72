// Purpose: the sinks of a run (runner/live/Sink.h), on rank 0: LogLines and ProgressBar on the
// terminal, StepsCsv (<dir>/<name>.steps.csv), TensorBoardEvents (<dir>/tensorboard/<name>/) and
// ResultWriter (<dir>/<name>.json, atomically, at every epoch's end and when the run ends).
// Rule: a resumed run cuts both per-step files back to the sizes its checkpoint recorded, so curves
// continue with no step twice. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runner/live/AppendFile.h"
#include "runner/live/EventFile.h"
#include "runner/live/Sink.h"

namespace exprun {

// The progress line (when no bar shows it), an evaluation's line, an epoch's line.
class LogLines : public Sink {
 public:
  explicit LogLines(RunInfo run) : run_(std::move(run)) {}
  void progress(const ProgressReport& p) override;
  void evaluation(const EvalRecord& e) override;
  void epochEnds(const EpochRecord& r, std::int64_t step) override;

 private:
  RunInfo run_;
};

// One line redrawn in place on a terminal (EXPRUN_PROGRESS=1/0 overrides).
class ProgressBar : public Sink {
 public:
  explicit ProgressBar(RunInfo run) : run_(std::move(run)) {}
  void status(const ProgressReport& p) override;
  void finish() override;

 private:
  RunInfo run_;
};

// Whether rank 0 shows a progress bar: EXPRUN_PROGRESS=1/0, else when stderr is a terminal.
bool progressBarWanted();

// Step, epoch, loss, lr, images/s, grad norm, loss scale, data wait, comm wait, run clock. Resumed
// with another global batch (--force), the epoch's step count restarts in steps of the new size:
// the CSV loses that epoch's rows after it (the event file keeps them).
class StepsCsv : public Sink {
 public:
  // `keepBytes`: the size a checkpoint recorded (< 0: a new file); rows of epoch `epoch` after step
  // `step` are cut too (runner/step/Position.h).
  // `breakdown`: a <phase>_s column per phase of the step breakdown after the others; `tokens`:
  // the throughput column is tokens_per_s (a language model's) instead of images_per_s.
  StepsCsv(const std::string& path, std::int64_t keepBytes, std::int64_t step, std::int64_t epoch, bool breakdown = false,
           bool tokens = false);
  void step(const StepRecord& r) override;
  void flush() override { file_.flush(); }
  std::int64_t bytes() const { return file_.bytes(); }

 private:
  bool breakdown_;
  AppendFile file_;
};

// Step scalars train/*, evaluations val/*, epoch figures epoch/*.
class TensorBoardEvents : public Sink {
 public:
  TensorBoardEvents(const std::string& path, std::int64_t keepBytes) : file_(path, keepBytes) {}
  void step(const StepRecord& r) override;
  void evaluation(const EvalRecord& e) override;
  void epochEnds(const EpochRecord& r, std::int64_t step) override;
  void flush() override { file_.flush(); }
  std::int64_t bytes() const { return file_.bytes(); }

 private:
  EventFile file_;
};

// Writes `result` (the run's, kept by the trainer) to `path` at every epoch's end and at the end.
class ResultWriter : public Sink {
 public:
  ResultWriter(std::string path, const ResultFile& result) : path_(std::move(path)), result_(result) {}
  void epochEnds(const EpochRecord&, std::int64_t) override { result_.write(path_); }
  void finish() override { result_.write(path_); }

 private:
  std::string path_;
  const ResultFile& result_;
};

// Seconds since the Unix epoch.
double wallClock();

}  // namespace exprun
