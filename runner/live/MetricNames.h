// Purpose: the one table of metric names (Lightning's one metrics dict, many loggers). What a step,
// an evaluation and an epoch report is produced here once, as (name, value) rows; TensorBoard's
// tags, MLflow's keys, the per-step CSV's header and rows, MLflow's catch-up from that CSV and the
// metric table of docs/reference.md (`exprun plugins --markdown`) all read these tables, so the
// names cannot drift apart. Torch-free.
//
// The names: per step `train/<column>` (the CSV's columns that trackers get), per evaluation
// `val/*`, per epoch `epoch/*` and the step breakdown's `time/<phase>_s` and `time/comm_overlap`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/live/Sink.h"

namespace exprun {

struct MetricValue {
  std::string name;
  double value = 0;
};
using MetricRows = std::vector<MetricValue>;

// A column of the per-step CSV: its header name, its printf format, its value, and the tracker
// metric it is logged as (nullptr: the CSV's only).
struct StepColumn {
  const char* column;
  const char* format;
  double (*get)(const StepRecord&);
  const char* metric;
  const char* meaning;
};
// In the CSV's order (the step breakdown's <phase>_s columns follow them when asked for).
const std::vector<StepColumn>& stepColumns();

// `tokens`: the throughput column is named tokens_per_s (train/tokens_per_s), a language model's.
std::string stepsCsvHeader(bool breakdown, bool tokens = false);  // with the newline
std::string stepsCsvRow(const StepRecord& r, bool breakdown);

MetricRows stepMetrics(const StepRecord& r);    // train/*
MetricRows evalMetrics(const EvalRecord& e);    // val/*
MetricRows epochMetrics(const EpochRecord& r);  // epoch/*, time/* (those the record has)

// When a tracker metric is sent: every step (train/*), at each evaluation (val/*), or at each
// epoch's end (epoch/*, time/*).
enum class MetricTime { Step, Evaluation, EpochEnd };
MetricTime metricTime(const std::string& name);
// A metric sent at every point of that kind (the first of its table): what a resumed MLflow run
// reads back to learn which points the attempt before it sent.
std::string alwaysSentMetric(MetricTime when);

// The tracker metrics in the rows of a per-step CSV written by stepsCsvRow (found by the header's
// column names, so any column order reads): (step, rows) per data row with step <= lastStep and
// step % every == 0.
struct CsvStepMetrics {
  std::int64_t step = 0;
  MetricRows rows;
};
std::vector<CsvStepMetrics> stepMetricsFromCsv(const std::string& csvText, std::int64_t lastStep, std::int64_t every);

// Every metric name with when it is reported and what it is (the docs' table).
struct MetricDoc {
  std::string name, when, meaning;
};
std::vector<MetricDoc> metricDocs();

}  // namespace exprun
