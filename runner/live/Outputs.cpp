// Purpose: the live outputs of a run (see Outputs.h).
#include "runner/live/Outputs.h"

#include <algorithm>

namespace exprun {
namespace {

constexpr std::size_t kMaxRows = 256;  // steps kept on the device before a flush

}  // namespace

namespace {

// The provenance's plain values as MLflow tags ("exprun.cpu_model"), with MLflow's own source tag.
std::vector<std::pair<std::string, std::string>> provenanceTags(const nlohmann::json& provenance) {
  std::vector<std::pair<std::string, std::string>> tags{{"mlflow.source.name", "exprun"}};
  for (auto it = provenance.begin(); it != provenance.end(); ++it) {
    if (it.value().is_object() || it.value().is_array() || it.value().is_null()) continue;
    std::string v = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
    tags.emplace_back("exprun." + it.key(), v.substr(0, 5000));
  }
  return tags;
}

}  // namespace

Outputs::Outputs(const RunInfo& run, const OutputConfig& output, const RunPaths& paths, ResultFile& result, Dist& dist,
                 const TrainPosition& start)
    : run_(run),
      dist_(dist),
      shared_(dist.active() && paths.writes() && (output.stepsCsv || output.tensorboard || !output.mlflow.trackingUri.empty())),
      result_(result) {
  if (dist.rank() == 0 && paths.writes()) {
    sinks_.push_back(std::make_unique<ResultWriter>(paths.result(), result));
    if (output.stepsCsv) {
      auto csv = std::make_unique<StepsCsv>(paths.stepsCsv(), start.csvBytes, start.step, start.epoch,
                                            output.stepBreakdown, run.unit == "tokens");
      csv_ = csv.get();
      sinks_.push_back(std::move(csv));
    }
  }
  if (dist.rank() == 0) sinks_.push_back(std::make_unique<LogLines>(run));
  if (dist.rank() == 0 && paths.writes() && output.tensorboard) {
    auto events = std::make_unique<TensorBoardEvents>(paths.tensorboardEvents(), start.eventBytes);
    events_ = events.get();
    sinks_.push_back(std::move(events));
  }
  if (dist.rank() == 0 && progressBarWanted()) {
    auto bar = std::make_unique<ProgressBar>(run);
    bar_ = bar.get();
    sinks_.push_back(std::move(bar));
  }
  if (dist.rank() == 0 && !output.mlflow.trackingUri.empty()) {
    MlflowStart st;
    st.runName = output.mlflow.runName.empty() ? run.name : output.mlflow.runName;
    st.params = flattenParams(result.spec);
    st.tags = provenanceTags(result.provenance);
    st.runId = result.mlflowRunId;
    if (paths.writes() && output.stepsCsv) st.stepsCsv = paths.stepsCsv();
    st.firstStep = start.step;
    st.runKey = result.mlflowRunKey;
    if (start.step > 0) {
      st.earlierEpochs = result.epochs;
      st.earlierEvals = result.evals;
    }
    std::vector<std::string> artifacts;
    if (paths.writes()) artifacts.push_back(paths.result());
    auto sink = std::make_unique<MlflowSink>(output.mlflow, std::move(st), &result.mlflowRunId, std::move(artifacts));
    mlflow_ = sink.get();
    sinks_.push_back(std::move(sink));
  }
  recording_ = csv_ || events_ || bar_ || mlflow_ || shared_;
}

void Outputs::epochBegins(const EpochMeters& at, double runSeconds) {
  flush();
  last_ = Last{at.normSum, at.dataWait, at.commWait, runSeconds, at.samples, reported(at.phases)};
}

void Outputs::afterStep(const StepSample& s) {
  if (!recording_) return;
  if (firstSeconds_ < 0) firstSeconds_ = s.runSeconds - 1e-9;
  rows_.push_back(s);
  rowWallTimes_.push_back(wallClock());
  if (rows_.size() >= kMaxRows) flush();  // at the same step on every rank
  if (bar_ && s.runSeconds - barDrawn_ >= 0.25) {
    if (shared_) {  // no flush here (the other ranks are not flushing): rank 0's own loss of the step
      const torch::Tensor l = s.loss.to(torch::kCPU);
      lastLoss_ = l[0].item<double>() / std::max(1.0, l[1].item<double>());
    } else {
      flush();
    }
    drawBar(s);
  }
}

void Outputs::drawBar(const StepSample& s) {
  barDrawn_ = s.runSeconds;
  const double rate = (s.runSeconds - firstSeconds_) / static_cast<double>(std::max<std::int64_t>(1, s.step - run_.firstStep));
  ProgressReport p;
  p.epoch = s.epoch;
  p.stepsInEpoch = s.stepsInEpoch;
  p.step = s.step;
  p.loss = lastLoss_;
  p.lr = s.lr;
  p.imagesPerS = static_cast<double>(run_.globalBatch * run_.unitsPerSample) / std::max(rate, 1e-9);
  p.etaS = rate * static_cast<double>(run_.totalSteps - s.step);
  for (auto& sink : sinks_) sink->status(p);
}

void Outputs::progressLine(const Progress& now, double lr, double runSeconds) {
  if (bar_) return;
  const EpochMeters& m = now.meters;
  const std::int64_t step = now.position.step;
  ProgressReport p;
  p.epoch = now.position.epoch;
  p.stepsInEpoch = m.steps;
  p.step = step;
  p.loss = m.lossSum / static_cast<double>(std::max<std::int64_t>(1, m.samples));
  p.lr = lr;
  p.imagesPerS = static_cast<double>(m.samples * run_.worldSize) / std::max(m.elapsed, 1e-9);
  p.etaS = runSeconds / static_cast<double>(std::max<std::int64_t>(1, step - run_.firstStep)) *
           static_cast<double>(run_.totalSteps - step);
  for (auto& sink : sinks_) sink->progress(p);
}

void Outputs::evaluation(const EvalRecord& e) {
  flush();
  last_.runSeconds = e.timeS;  // the next step's images/s without the evaluation's time
  for (auto& sink : sinks_) sink->evaluation(e);
}

void Outputs::epochEnds(const EpochRecord& r, std::int64_t step) {
  for (auto& sink : sinks_) sink->epochEnds(r, step);
}

StepRecord Outputs::recordOf(const StepSample& s, double lossSum, double samples, double normSum, double scale) const {
  StepRecord r;
  r.step = s.step;
  r.epoch = s.epoch;
  r.loss = lossSum / std::max(1.0, samples);
  r.lr = s.lr;
  const double seconds = s.runSeconds - last_.runSeconds;
  r.imagesPerS = static_cast<double>((s.samples - last_.samples) * run_.worldSize) / std::max(seconds, 1e-9);
  r.tokens = run_.unit == "tokens";
  r.gradNorm = normSum - last_.normSum;
  r.lossScale = scale;
  r.dataWaitS = s.dataWait - last_.dataWait;
  r.commWaitS = s.commWait - last_.commWait;
  for (std::size_t i = 0; i < kPhases; ++i) r.phases[i] = s.phases[i] - last_.phases[i];
  r.runSeconds = s.runSeconds;
  return r;
}

OutputSizes Outputs::flush() {
  if (!rows_.empty()) {
    std::vector<torch::Tensor> loss, norm, scale;
    for (const StepSample& s : rows_) {
      loss.push_back(s.loss);
      norm.push_back(s.normSum);
      scale.push_back(s.lossScale.defined() ? s.lossScale.reshape({}).to(torch::kDouble)
                                            : torch::ones({}, s.normSum.options().dtype(torch::kDouble)));
    }
    torch::Tensor losses = torch::stack(loss);  // rows x (loss sum, samples)
    if (shared_) dist_.sumInPlace(losses);
    losses = losses.to(torch::kCPU, torch::kDouble).contiguous();
    const torch::Tensor norms = torch::stack(norm).to(torch::kCPU, torch::kDouble).contiguous();
    const torch::Tensor scales = torch::stack(scale).to(torch::kCPU, torch::kDouble).contiguous();
    const double* l = losses.data_ptr<double>();
    const double* n = norms.data_ptr<double>();
    const double* sc = scales.data_ptr<double>();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const StepSample& s = rows_[i];
      StepRecord r = recordOf(s, l[2 * i], l[2 * i + 1], n[i], sc[i]);
      r.wallTime = rowWallTimes_[i];
      for (auto& sink : sinks_) sink->step(r);
      lastLoss_ = r.loss;
      last_ = Last{n[i], s.dataWait, s.commWait, s.runSeconds, s.samples, s.phases};
    }
    rows_.clear();
    rowWallTimes_.clear();
  }
  for (auto& sink : sinks_) sink->flush();
  return OutputSizes{csv_ ? csv_->bytes() : -1, events_ ? events_->bytes() : -1};
}

void Outputs::finish() {
  flush();
  if (mlflow_) {
    mlflow_->setEndStatus(result_.status == "completed" ? "FINISHED" : "KILLED");
    mlflow_->settle(10);  // the run's id into the result file's last write
  }
  for (auto& sink : sinks_) sink->finish();
}

}  // namespace exprun
