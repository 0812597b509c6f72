// Purpose: the step breakdown (runner/metrics/Breakdown.h) of real short runs — its phases add up to
// the epoch measured by its own clock, a slow data plugin shows as data wait, the per-step CSV's
// columns add up to the epoch's — and the profiled window (runner/train/Profile.h): a trace of the
// window's steps only, with the loop's phases as scopes, one step's memory timeline, and a
// per-module table whose FLOPs add up to the model's counted FLOPs.
#include <fstream>
#include <sstream>

#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"
#include "runner/metrics/Flops.h"
#include "runner/spec/Spec.h"
#include "runner/train/Profile.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;

namespace {

const char* kBreakdownSpec = R"(name: b
seed: 2
model: {type: small_cnn, width: 4, hidden: 16}
data: {type: fashion_mnist, train_limit: 1024, test_limit: 500}
optimizer: {type: sgd, lr: 0.1, base_batch: 64, momentum: 0.9}
train: {epochs: 1, batch_size: 64, threads: 1, workers: 1, log_every: 0}
)";

const char* kSlowDataSpec = R"(name: slow
seed: 2
model: {type: small_cnn, width: 4, hidden: 16}
data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, train_size: 256, test_size: 64, batch_delay_ms: 40}
optimizer: {type: sgd, lr: 0.1, base_batch: 32}
train: {epochs: 1, batch_size: 32, max_steps: 6, threads: 1, workers: 0, log_every: 0, eval: false}
)";

nlohmann::json runSpec(const char* spec, const std::vector<std::string>& sets, const std::string& path = "") {
  return Trainer(loadSpecFromString(spec, "b.yaml", sets)).run(path).result;
}

double phaseOf(const nlohmann::json& epoch, const char* key, const char* what = "mean_s") {
  return epoch["breakdown"]["parts"][key][what].get<double>();
}

}  // namespace

TEST_SUITE("breakdown") {
  TEST_CASE("the breakdown's phases add up to the epoch: its training time and its evaluation") {
    const nlohmann::json j = runSpec(kBreakdownSpec, {"train.eval_every_steps=8"});
    REQUIRE(j["epochs"].size() == 1);
    const nlohmann::json& e = j["epochs"][0];
    REQUIRE(e.contains("breakdown"));
    const nlohmann::json& b = e["breakdown"];
    CHECK(b["clock"] == "host");
    double sum = 0, fractions = 0;
    for (auto& [key, p] : b["parts"].items()) {
      CHECK(p["mean_s"].get<double>() >= 0);
      CHECK(p["max_s"].get<double>() >= p["mean_s"].get<double>());
      if (key == "recompute") continue;  // inside backward
      sum += p["mean_s"].get<double>();
      fractions += p["fraction"].get<double>();
    }
    const double epoch = b["epoch_s"].get<double>();
    CHECK(sum == doctest::Approx(b["mean_epoch_s"].get<double>()).epsilon(1e-9));
    CHECK(fractions == doctest::Approx(1.0).epsilon(1e-9));
    // time_s (the epoch's own clock) leaves the evaluations out; the breakdown has them as "eval".
    const double evalS = phaseOf(e, "eval");
    CHECK(evalS > 0);
    // Evaluation missing from or counted twice in the breakdown would leave a gap of evalS; the two
    // clocks are read at different points, so a loaded machine (taskset -c 0, a CPU hog) may preempt
    // between them: a gap within 2 % of the epoch or half the evaluation time passes.
    CHECK(std::abs(epoch - (e["time_s"].get<double>() + evalS)) <= std::max(0.02 * epoch, 0.5 * evalS));
    for (const char* p : {"forward", "backward", "optimizer", "h2d"}) CHECK(phaseOf(e, p) > 0);
    CHECK(phaseOf(e, "comm_exposed") == 0);  // one process: nothing exchanged
    CHECK(phaseOf(e, "recompute") == 0);
    CHECK(phaseOf(e, "rest") < 0.15 * epoch);
    CHECK_FALSE(b.contains("comm_overlap"));
  }

  TEST_CASE("activation checkpointing's recomputation is inside backward and shown apart") {
    const nlohmann::json e = runSpec(kBreakdownSpec, {"train.eval=false", "train.max_steps=6", "train.activation_checkpointing=[all]"})["epochs"][0];
    CHECK(phaseOf(e, "recompute") > 0);
    CHECK(phaseOf(e, "backward") > phaseOf(e, "recompute"));
  }

  TEST_CASE("a data plugin that takes 40 ms a batch shows as data wait") {
    const nlohmann::json slow = runSpec(kSlowDataSpec, {})["epochs"][0];
    const nlohmann::json quick = runSpec(kSlowDataSpec, {"data.batch_delay_ms=0"})["epochs"][0];
    // 6 batches made in the training thread (workers: 0), 40 ms each
    CHECK(phaseOf(slow, "data_wait") >= 6 * 0.040 * 0.95);
    CHECK(slow["breakdown"]["parts"]["data_wait"]["fraction"].get<double>() > 0.5);
    CHECK(phaseOf(quick, "data_wait") < phaseOf(slow, "data_wait") - 0.2);
  }

  TEST_CASE("the per-step CSV's breakdown columns add up to the epoch's phases") {
    TempDir dir;
    const std::string path = dir.file("b.json");
    const nlohmann::json e =
        runSpec(kBreakdownSpec, {"train.eval=false", "train.max_steps=10", "output.step_breakdown=true"}, path)["epochs"][0];
    std::ifstream in(dir.file("b.steps.csv"));
    std::string header;
    std::getline(in, header);
    CHECK(header.find(",data_wait_s,h2d_s,forward_s,backward_s,recompute_s,comm_exposed_s,optimizer_s,ema_s,eval_s,"
                      "checkpoint_s,rest_s") != std::string::npos);
    std::vector<std::string> columns;
    std::stringstream hs(header);
    for (std::string c; std::getline(hs, c, ',');) columns.push_back(c);
    const auto forwardAt = std::find(columns.begin(), columns.end(), "forward_s") - columns.begin();
    double forward = 0;
    int rows = 0;
    for (std::string line; std::getline(in, line); ++rows) {
      std::stringstream ls(line);
      std::string cell;
      for (long k = 0; k <= forwardAt; ++k) std::getline(ls, cell, ',');
      forward += std::stod(cell);
    }
    CHECK(rows == 10);
    CHECK(forward == doctest::Approx(phaseOf(e, "forward")).epsilon(0.01));
  }

  TEST_CASE("a profiled window: a trace of its steps only, with the loop's phases, and a memory timeline") {
    TempDir dir;
    const std::string path = dir.file("p.json");
    const nlohmann::json j =
        runSpec(kBreakdownSpec, {"name=p", "train.eval=false", "train.max_steps=6", "train.profile.start_step=2", "train.profile.steps=2"},
            path);
    const nlohmann::json trace = nlohmann::json::parse(readText(dir.file("p.trace.json")));
    std::map<std::string, int> count;
    for (const auto& ev : trace["traceEvents"])
      if (ev.contains("name") && ev.value("ph", "") == "X") ++count[ev["name"].get<std::string>()];
    CHECK(count["aten::convolution"] > 0);
    CHECK(count["aten::convolution_backward"] > 0);
    // one forward, backward and data wait per step: the window's 2 steps, nothing before or after
    CHECK(count["exprun::forward"] == 2);
    CHECK(count["exprun::backward"] == 2);
    CHECK(count["exprun::data_wait"] == 2);
    CHECK(count["exprun::h2d"] == 2);
    CHECK(count["exprun::optimizer"] == 4);  // zeroing the gradients, then the step
    const nlohmann::json& p = j["profile"];
    CHECK(p["window"]["start_step"] == 2);
    CHECK(p["window"]["steps"] == 2);
    CHECK(p["trace"] == "p.trace.json");
    const nlohmann::json& t = p["memory_timeline"];
    REQUIRE(t["ms"].size() > 10);
    CHECK(t["ms"].size() == t["live_mib"].size());
    std::set<std::string> phases(t["phase"].begin(), t["phase"].end());
    CHECK(phases.count("forward") == 1);
    CHECK(phases.count("backward") == 1);
    CHECK(p["modules"]["modules"].size() > 3);
  }

  TEST_CASE("the per-module table's FLOPs add up to the model's counted FLOPs") {
    for (const char* model : {"{type: small_cnn, width: 4, hidden: 16}", "{type: resnet18, small_input_stem: true}"}) {
      const Spec spec = loadSpecFromString(
          std::string("name: m\nmodel: ") + model + "\ndata: {type: synthetic, channels: 3, height: 16, width: 16, num_classes: 10}\n",
          "m.yaml");
      const DataInfo info{3, 16, 16, 10};
      auto counted = build<ModelKind>(spec.model, info);
      const StepFlops flops = countStepFlops(*counted, 3, 16, 16, [&](torch::Tensor x) { return counted->forward(x); });
      auto m = build<ModelKind>(spec.model, info);
      const ModuleTable t = moduleTable(*m, torch::kCPU, 4, 3, 16, 16, 1e11, std::nullopt, 1);
      REQUIRE(t.note.empty());
      double modules = 0, stages = 0;
      for (const ModuleRow& r : t.modules) modules += r.flopsPerImage;
      for (const ModuleRow& r : t.stages) stages += r.flopsPerImage;
      INFO(model);
      CHECK(modules == doctest::Approx(flops.total).epsilon(0.001));
      CHECK(stages == doctest::Approx(modules).epsilon(1e-9));
      CHECK(t.modules.front().forwardS > 0);
      std::int64_t params = 0;
      for (const ModuleRow& r : t.modules) params += r.params;
      std::int64_t all = 0;
      for (const auto& q : m->parameters()) all += q.numel();
      CHECK(params == all);
    }
  }
}
