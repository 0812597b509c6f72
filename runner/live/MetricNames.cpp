// Purpose: the one table of metric names (see MetricNames.h).
#include "runner/live/MetricNames.h"

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>

#include "runner/util/Format.h"

namespace exprun {
namespace {

// A figure of a record R: its name, its value when the record has it (std::nullopt: not this
// record's), what it is.
template <class R>
struct RecordMetric {
  const char* name;
  std::optional<double> (*get)(const R&);
  const char* meaning;
};
using EpochMetric = RecordMetric<EpochRecord>;
using EvalMetric = RecordMetric<EvalRecord>;

template <class R>
MetricRows rowsOf(const std::vector<RecordMetric<R>>& table, const R& r) {
  MetricRows v;
  for (const RecordMetric<R>& m : table)
    if (const std::optional<double> x = m.get(r)) v.push_back({m.name, *x});
  return v;
}

const std::vector<EvalMetric>& evalTable() {
  using R = const EvalRecord&;
  static const std::vector<EvalMetric> t{
      {"val/top1", [](R e) -> std::optional<double> { return e.valTop1; }, "validation Top-1, %"},
      {"val/top5", [](R e) -> std::optional<double> { return e.valTop5; }, "validation Top-5, %"},
      {"val/loss", [](R e) -> std::optional<double> { return e.valLoss; }, "validation loss"},
      {"val/time_s", [](R e) -> std::optional<double> { return e.timeS; }, "run clock at the evaluation's end, s"},
  };
  return t;
}

const std::vector<EpochMetric>& epochTable() {
  using R = const EpochRecord&;
  static const std::vector<EpochMetric> t{
      {"epoch/epoch", [](R r) -> std::optional<double> { return static_cast<double>(r.epoch); }, "the epoch (1-based)"},
      {"epoch/train_loss", [](R r) -> std::optional<double> { return r.trainLoss; }, "mean training loss of the epoch"},
      {"epoch/train_top1", [](R r) -> std::optional<double> { return r.trainTop1; },
       "training Top-1 of the epoch, % (against the most weighted label with Mixup/CutMix)"},
      {"epoch/time_s", [](R r) -> std::optional<double> { return r.timeS; },
       "the epoch's training time, s (evaluations in it left out)"},
      {"epoch/images_per_s", [](R r) -> std::optional<double> { return r.imagesPerS; }, "training images per second, all ranks"},
      {"epoch/peak_memory_bytes", [](R r) -> std::optional<double> { return static_cast<double>(r.peakMemoryBytes); },
       "training's peak memory, max over ranks (CPU: resident set; CUDA: the caching allocator's reserved)"},
      {"epoch/peak_allocated_bytes", [](R r) -> std::optional<double> { return static_cast<double>(r.peakAllocatedBytes); },
       "training's peak of live tensors, max over ranks (-1: not measured)"},
      {"epoch/flops_per_s", [](R r) -> std::optional<double> { return r.flopsPerS; },
       "counted training FLOPs per image x images/s, all ranks"},
      {"epoch/mfu", [](R r) -> std::optional<double> { return r.mfu <= 1 ? std::optional<double>(r.mfu) : std::nullopt; },
       "model FLOPs utilisation, 0-1 (absent when above 1: the peak was wrong)"},
      {"epoch/val_top1_ema", [](R r) { return r.valTop1Ema; }, "Top-1 of the EMA weights, % (with train.ema_decay)"},
      {"epoch/eval_peak_allocated_bytes",
       [](R r) { return r.evalPeakAllocatedBytes >= 0 ? std::optional<double>(static_cast<double>(r.evalPeakAllocatedBytes)) : std::nullopt; },
       "the evaluations' peak of live tensors, max over ranks (absent without evaluation)"},
  };
  return t;
}

// A step column's or metric's name as a language model's run writes it: images_per_s -> tokens_per_s.
std::string tokenNamed(const std::string& name, bool tokens) {
  const std::string images = "images_per_s";
  const auto at = name.find(images);
  return tokens && at != std::string::npos ? name.substr(0, at) + "tokens_per_s" + name.substr(at + images.size()) : name;
}
}  // namespace

const std::vector<StepColumn>& stepColumns() {
  using R = const StepRecord&;
  static const std::vector<StepColumn> c{
      {"step", "%.0f", [](R r) { return static_cast<double>(r.step); }, nullptr, "optimizer steps done"},
      {"epoch", "%.0f", [](R r) { return static_cast<double>(r.epoch); }, nullptr, "the epoch (1-based)"},
      {"loss", "%.9g", [](R r) { return r.loss; }, "train/loss", "the step's mean loss over the global batch"},
      {"lr", "%.9g", [](R r) { return r.lr; }, "train/lr", "learning rate of the step"},
      {"images_per_s", "%.6g", [](R r) { return r.imagesPerS; }, "train/images_per_s",
       "training images (a language model: tokens_per_s, train/tokens_per_s, tokens) per second, all ranks, since "
       "the last logged step"},
      {"grad_norm", "%.9g", [](R r) { return r.gradNorm; }, "train/grad_norm", "gradients' L2 norm before clipping"},
      {"loss_scale", "%.9g", [](R r) { return r.lossScale; }, "train/loss_scale", "fp16 loss scale (1 otherwise)"},
      {"data_wait_s", "%.6g", [](R r) { return r.dataWaitS; }, nullptr, "the step's wait for data, s"},
      {"comm_wait_s", "%.6g", [](R r) { return r.commWaitS; }, nullptr, "the step's wait for the gradient exchange, s"},
      {"time_s", "%.6f", [](R r) { return r.runSeconds; }, nullptr, "run clock after the step, s"},
  };
  return c;
}

std::string stepsCsvHeader(bool breakdown, bool tokens) {
  std::string h;
  for (const StepColumn& c : stepColumns()) h += (h.empty() ? "" : ",") + tokenNamed(c.column, tokens);
  if (breakdown)
    for (std::size_t i = 0; i < kPhases; ++i) h += std::string(",") + phaseKey(phaseAt(i)) + "_s";
  return h + "\n";
}

std::string stepsCsvRow(const StepRecord& r, bool breakdown) {
  std::string row;
  for (const StepColumn& c : stepColumns()) {
    if (!row.empty()) row += ',';
    row += strf(c.format, c.get(r));
  }
  if (breakdown)
    for (double s : r.phases) row += strf(",%.6g", s);
  return row + "\n";
}

MetricRows stepMetrics(const StepRecord& r) {
  MetricRows v;
  for (const StepColumn& c : stepColumns())
    if (c.metric) v.push_back({tokenNamed(c.metric, r.tokens), c.get(r)});
  return v;
}

MetricRows evalMetrics(const EvalRecord& e) { return rowsOf(evalTable(), e); }

MetricTime metricTime(const std::string& name) {
  if (name.rfind("train/", 0) == 0) return MetricTime::Step;
  if (name.rfind("val/", 0) == 0) return MetricTime::Evaluation;
  return MetricTime::EpochEnd;
}

std::string alwaysSentMetric(MetricTime when) {
  switch (when) {
    case MetricTime::Step:
      for (const StepColumn& c : stepColumns())
        if (c.metric) return c.metric;
      break;
    case MetricTime::Evaluation: return evalTable().front().name;
    case MetricTime::EpochEnd: return epochTable().front().name;
  }
  return {};
}

MetricRows epochMetrics(const EpochRecord& r) {
  MetricRows v = rowsOf(epochTable(), r);
  if (!r.breakdown.empty()) {  // one per phase: seconds in the epoch, mean over ranks
    for (std::size_t i = 0; i < kPhases; ++i)
      v.push_back({std::string("time/") + phaseKey(phaseAt(i)) + "_s", r.breakdown.mean[i]});
    if (r.breakdown.commOverlap) v.push_back({"time/comm_overlap", *r.breakdown.commOverlap});
  }
  return v;
}

std::vector<CsvStepMetrics> stepMetricsFromCsv(const std::string& csvText, std::int64_t lastStep, std::int64_t every) {
  std::vector<CsvStepMetrics> out;
  std::istringstream in(csvText);
  std::string line;
  if (!std::getline(in, line)) return out;
  std::map<std::string, std::size_t> at;  // header name -> column
  {
    std::stringstream cells(line);
    std::string cell;
    for (std::size_t i = 0; std::getline(cells, cell, ','); ++i) at[cell] = i;
  }
  const bool tokens = at.count("tokens_per_s") > 0;  // a language model's file
  std::vector<std::pair<std::string, std::size_t>> wanted;  // (metric, column)
  for (const StepColumn& c : stepColumns()) {
    const std::string column = tokenNamed(c.column, tokens);
    if (c.metric && at.count(column)) wanted.emplace_back(tokenNamed(c.metric, tokens), at[column]);
  }
  if (!at.count("step")) return out;
  const std::size_t stepAt = at["step"];
  while (std::getline(in, line)) {
    std::vector<double> f;
    std::stringstream cells(line);
    std::string cell;
    while (std::getline(cells, cell, ',')) f.push_back(std::strtod(cell.c_str(), nullptr));
    if (f.size() < at.size()) continue;  // a row cut short
    const auto step = static_cast<std::int64_t>(f[stepAt]);
    if (step > lastStep || step % every != 0) continue;
    CsvStepMetrics s{step, {}};
    for (const auto& [metric, i] : wanted) s.rows.push_back({metric, f[i]});
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<MetricDoc> metricDocs() {
  std::vector<MetricDoc> d;
  for (const StepColumn& c : stepColumns())
    if (c.metric) d.push_back({c.metric, "every step (MLflow: every log_every-th)", c.meaning});
  d.push_back({"train/tokens_per_s", "every step, language models (in place of train/images_per_s)",
               "training tokens per second, all ranks, since the last logged step"});
  for (const EvalMetric& m : evalTable()) d.push_back({m.name, "every evaluation", m.meaning});
  for (const EpochMetric& m : epochTable()) d.push_back({m.name, "every epoch", m.meaning});
  d.push_back({"time/<phase>_s", "every epoch (with the step breakdown)",
               "seconds of the epoch in the phase, mean over ranks (phases: docs/metrics.md, step breakdown)"});
  d.push_back({"time/comm_overlap", "every epoch (several ranks)", "share of the gradient exchange hidden behind backward"});
  return d;
}

}  // namespace exprun
