// Purpose: the one table of metric names (runner/live/MetricNames.h): the per-step CSV keeps its
// bytes, MLflow's catch-up reads the CSV's columns by name, every name a sink sends is documented,
// and the epoch's optional figures come and go with the record.
#include <algorithm>
#include <set>

#include "runner/live/MetricNames.h"
#include "runner/util/Format.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {

StepRecord sampleStep(std::int64_t step) {
  StepRecord r;
  r.step = step;
  r.epoch = 1 + step / 10;
  r.loss = 2.302585093 / static_cast<double>(step);
  r.lr = 0.1 * step / 7.0;
  r.imagesPerS = 1234.5678 + step;
  r.gradNorm = 3.14159265358979 * step;
  r.lossScale = 65536;
  r.dataWaitS = 0.00123;
  r.commWaitS = 0.0456;
  r.runSeconds = 12.3456789 + step;
  for (std::size_t i = 0; i < kPhases; ++i) r.phases[i] = 0.001 * static_cast<double>(i + 1);
  return r;
}

std::set<std::string> names(const MetricRows& rows) {
  std::set<std::string> s;
  for (const auto& m : rows) s.insert(m.name);
  return s;
}

}  // namespace

TEST_SUITE("metric_names") {
  TEST_CASE("the per-step CSV: the header and rows the sinks wrote before the table, byte for byte") {
    CHECK(stepsCsvHeader(false) == "step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s\n");
    const StepRecord r = sampleStep(13);
    const std::string before = strf("%lld,%lld,%.9g,%.9g,%.6g,%.9g,%.9g,%.6g,%.6g,%.6f", 13LL, 2LL, r.loss, r.lr,
                                    r.imagesPerS, r.gradNorm, r.lossScale, r.dataWaitS, r.commWaitS, r.runSeconds);
    CHECK(stepsCsvRow(r, false) == before + "\n");
    std::string phases;
    for (double s : r.phases) phases += strf(",%.6g", s);
    CHECK(stepsCsvRow(r, true) == before + phases + "\n");
    const std::string header = stepsCsvHeader(true);
    CHECK(header.find(",time_s,data_wait_s,h2d_s,forward_s,") != std::string::npos);
    CHECK(std::count(header.begin(), header.end(), ',') == std::count(phases.begin(), phases.end(), ',') + 9);
  }

  TEST_CASE("a language model's throughput is tokens_per_s in the CSV, the trackers and the catch-up") {
    CHECK(stepsCsvHeader(false, true) == "step,epoch,loss,lr,tokens_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s\n");
    StepRecord r = sampleStep(4);
    r.tokens = true;
    const std::set<std::string> sent = names(stepMetrics(r));
    CHECK(sent.count("train/tokens_per_s") == 1);
    CHECK(sent.count("train/images_per_s") == 0);
    const auto back = stepMetricsFromCsv(stepsCsvHeader(false, true) + stepsCsvRow(r, false), 10, 1);
    REQUIRE(back.size() == 1);
    CHECK(names(back[0].rows) == sent);
    std::set<std::string> documented;
    for (const MetricDoc& d : metricDocs()) documented.insert(d.name);
    CHECK(documented.count("train/tokens_per_s") == 1);
  }

  TEST_CASE("MLflow's catch-up reads the CSV's tracked columns by name: every log_every-th step up to the checkpoint") {
    std::string csv = stepsCsvHeader(true);
    for (std::int64_t s = 1; s <= 12; ++s) csv += stepsCsvRow(sampleStep(s), true);
    csv += "13,2,0.5";  // a row cut short by a kill: skipped
    const auto got = stepMetricsFromCsv(csv, 10, 2);
    REQUIRE(got.size() == 5);
    for (std::size_t k = 0; k < got.size(); ++k) {
      const std::int64_t step = 2 * static_cast<std::int64_t>(k + 1);
      CHECK(got[k].step == step);
      const MetricRows want = stepMetrics(sampleStep(step));
      REQUIRE(got[k].rows.size() == want.size());
      for (std::size_t i = 0; i < want.size(); ++i) {
        CHECK(got[k].rows[i].name == want[i].name);
        CHECK(got[k].rows[i].value == doctest::Approx(want[i].value).epsilon(1e-5));  // images_per_s: 6 digits
      }
    }
    // Columns in another order (a CSV of a later version, or written by hand): read by their names.
    const auto moved = stepMetricsFromCsv("lr,step,loss,epoch\n0.25,4,1.5,1\n0.125,8,0.75,1\n", 100, 4);
    REQUIRE(moved.size() == 2);
    CHECK(moved[1].step == 8);
    REQUIRE(moved[1].rows.size() == 2);
    CHECK(moved[1].rows[0].name == "train/loss");
    CHECK(moved[1].rows[0].value == 0.75);
    CHECK(moved[1].rows[1].name == "train/lr");
    CHECK(moved[1].rows[1].value == 0.125);
    CHECK(stepMetricsFromCsv("", 10, 1).empty());
    CHECK(stepMetricsFromCsv("loss,lr\n1,2\n", 10, 1).empty());  // no step column: nothing to place
  }

  TEST_CASE("an epoch's optional figures come with the record and only then") {
    EpochRecord r;
    r.epoch = 3;
    r.mfu = 1.7;  // above 1: the peak was wrong, no point
    std::set<std::string> n = names(epochMetrics(r));
    CHECK(n.count("epoch/epoch") == 1);
    CHECK(n.count("epoch/mfu") == 0);
    CHECK(n.count("epoch/val_top1_ema") == 0);
    CHECK(n.count("epoch/eval_peak_allocated_bytes") == 0);
    CHECK(std::none_of(n.begin(), n.end(), [](const std::string& s) { return s.rfind("time/", 0) == 0; }));
    r.mfu = 0.4;
    r.valTop1Ema = 55.5;
    r.evalPeakAllocatedBytes = 1024;
    r.breakdown.epochS = r.breakdown.meanEpochS = 2;
    r.breakdown.mean[0] = 1;
    r.breakdown.commOverlap = 0.75;
    REQUIRE_FALSE(r.breakdown.empty());
    const MetricRows rows = epochMetrics(r);
    n = names(rows);
    CHECK(n.count("epoch/mfu") == 1);
    CHECK(n.count("epoch/val_top1_ema") == 1);
    CHECK(n.count("epoch/eval_peak_allocated_bytes") == 1);
    CHECK(n.count("time/data_wait_s") == 1);
    CHECK(n.count("time/comm_overlap") == 1);
    CHECK(n.size() == rows.size());  // no name twice
    const auto ema = std::find_if(rows.begin(), rows.end(), [](const MetricValue& m) { return m.name == "epoch/val_top1_ema"; });
    CHECK(ema->value == 55.5);
  }

  TEST_CASE("MLflow's resume probe: every point of a kind has its kind's always-sent metric, and each name has one kind") {
    EpochRecord bare, full;
    full.valTop1Ema = 1;
    full.evalPeakAllocatedBytes = 1;
    full.breakdown.epochS = full.breakdown.meanEpochS = 1;
    full.breakdown.commOverlap = 0.5;
    CHECK(names(stepMetrics(sampleStep(1))).count(alwaysSentMetric(MetricTime::Step)) == 1);
    CHECK(names(evalMetrics(EvalRecord{})).count(alwaysSentMetric(MetricTime::Evaluation)) == 1);
    for (const EpochRecord* r : {&bare, &full}) CHECK(names(epochMetrics(*r)).count(alwaysSentMetric(MetricTime::EpochEnd)) == 1);
    for (const std::string& n : names(stepMetrics(sampleStep(1)))) CHECK((metricTime(n) == MetricTime::Step));
    for (const std::string& n : names(evalMetrics(EvalRecord{}))) CHECK((metricTime(n) == MetricTime::Evaluation));
    for (const std::string& n : names(epochMetrics(full))) {  // time/* too: sent with the epoch's end
      INFO(n);
      CHECK((metricTime(n) == MetricTime::EpochEnd));
    }
  }

  TEST_CASE("every name a sink sends is in the docs' table, and the table names nothing else") {
    EpochRecord r;
    r.valTop1Ema = 1;
    r.evalPeakAllocatedBytes = 1;
    r.breakdown.epochS = r.breakdown.meanEpochS = 1;
    r.breakdown.commOverlap = 0.5;
    StepRecord tokens = sampleStep(1);
    tokens.tokens = true;  // a language model's step (train/tokens_per_s)
    std::set<std::string> sent = names(stepMetrics(sampleStep(1)));
    for (const auto& s : {names(stepMetrics(tokens)), names(evalMetrics(EvalRecord{})), names(epochMetrics(r))})
      sent.insert(s.begin(), s.end());
    std::set<std::string> documented;
    for (const MetricDoc& d : metricDocs()) {
      CHECK_FALSE(d.when.empty());
      CHECK_FALSE(d.meaning.empty());
      CHECK(documented.insert(d.name).second);
    }
    for (const std::string& name : sent) {
      const bool phase = name.rfind("time/", 0) == 0 && name != "time/comm_overlap";
      INFO(name);
      CHECK(documented.count(phase ? "time/<phase>_s" : name) == 1);
    }
    for (const std::string& name : documented)
      if (name != "time/<phase>_s") {
        INFO(name);
        CHECK(sent.count(name) == 1);
      }
  }
}
