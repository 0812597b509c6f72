// Purpose: the `method` plugin kind, with a method registered in this file (no core file touched):
// a spec lists it (validated, checked against the whole spec with the key path, overridden by
// `--set methods[i].key=...`); a run calls its hooks in order; it changes a batch's targets and the
// loss; it saves its state in a checkpoint and gets it back on resume; it writes its section of the
// result file; a checkpoint holding the state of a method the spec does not list is refused.
#include <filesystem>

#include "runner/api/Method.h"
#include "runner/checkpoint/Checkpoint.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

using namespace exprun;
using exprun::test::TempDir;

namespace {

std::vector<std::string>& events() {
  static std::vector<std::string> e;
  return e;
}

struct ProbeSettings {
  double scale = 1.0;  // the loss is multiplied by it
  bool soft = false;   // the batch gets one-hot soft targets
};
const OptionTable<ProbeSettings> kProbeOptions{{
    field("scale", &ProbeSettings::scale, "multiplies the loss", {0.0}),
    field("soft", &ProbeSettings::soft, "one-hot soft targets instead of the labels"),
}};

class Probe : public Method {
 public:
  explicit Probe(const Options& o) : s_(kProbeOptions.read(o)) {}
  void setUp(RunContext& run) override {
    classes_ = run.dataInfo().numClasses;
    events().push_back("setUp");
  }
  void restore(RunContext&, const nlohmann::json& state) override {
    batches_ = state.at("batches").get<std::int64_t>();
    events().push_back("restore " + state.dump());
  }
  void begin(RunContext&) override { events().push_back("begin"); }
  void beforeEpoch(RunContext&, std::int64_t epoch, bool fresh) override {
    events().push_back("epoch " + std::to_string(epoch) + (fresh ? " fresh" : " resumed"));
  }
  void onBatch(StepBatch& b) override {
    ++batches_;
    if (s_.soft) b.soft = torch::one_hot(b.y, classes_).to(torch::kFloat);
  }
  torch::Tensor loss(const torch::Tensor& loss, const torch::Tensor&, const StepBatch&) override { return loss * s_.scale; }
  void beforeOptimizerStep(std::int64_t step) override { events().push_back("before step " + std::to_string(step)); }
  void afterOptimizerStep(std::int64_t step) override { events().push_back("after step " + std::to_string(step)); }
  void afterEpoch(RunContext&, EpochRecord& r) override { events().push_back("end of epoch " + std::to_string(r.epoch)); }
  void afterTraining(RunContext&) override { events().push_back("afterTraining"); }
  nlohmann::json state() const override { return {{"batches", batches_}}; }
  nlohmann::json figures() const override { return {{"batches", batches_}}; }

 private:
  ProbeSettings s_;
  std::int64_t classes_ = 0;
  std::int64_t batches_ = 0;
};

// A scale of 3 is refused by the method's check of the whole spec (its key named).
void checkProbe(const Spec& spec, std::size_t index) {
  if (kProbeOptions.read(spec.methods[index]).scale == 3.0) throw SpecProblem("scale", "3 is not a scale this probe takes");
}

PluginInfo probeInfo() {
  PluginInfo i;
  i.name = "test_probe";
  i.help = "records the hooks a run calls (tests/api/MethodTest.cpp)";
  i.options = kProbeOptions.decls();
  i.check = checkProbe;
  i.columns = {ResultColumn{"Probe batches", "probe_batches", "/batches", "%.0f"}};
  return i;
}
const Register<MethodKind> kProbe{probeInfo(), [](const Options& o) -> std::unique_ptr<Method> { return std::make_unique<Probe>(o); }};

Spec probeSpec(std::vector<std::string> sets) {
  sets.insert(sets.begin(), "methods=[{type: test_probe}]");
  return loadSpecFromString(test::kSmallRunSpec, "p.yaml", sets);
}

}  // namespace

TEST_SUITE("methods") {
  TEST_CASE("a spec lists methods: validated, checked with the key path, overridden, written back") {
    const Spec s = probeSpec({"methods[0].scale=0.5"});
    REQUIRE(s.methods.size() == 1);
    CHECK(s.methods[0].type() == "test_probe");
    CHECK(std::get<double>(s.methods[0].value("scale")) == 0.5);
    CHECK(loadSpecFromString(s.toYaml(), "again.yaml").toJson() == s.toJson());
    CHECK(s.toJson()["methods"][0]["scale"] == 0.5);
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods[0].scale=3"}), "--set 'methods[0].scale=3'",
                            "methods[0].scale: 3 is not a scale");
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods[0].sclae=1"}), "methods[0].sclae", "did you mean 'scale'");
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods[1]={type: test_probe}"}), "methods[1]", "listed twice");
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods[3]={type: test_probe}"}), "methods[3]", "1 element(s)");
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods={type: test_probe}"}), "methods", "expected a list of methods");
    CHECK_THROWS_CONTAINING(SpecError, probeSpec({"methods[0].type=probe"}), "methods[0].type",
                            "unknown method type 'probe'");
    const std::string yaml = std::string(test::kSmallRunSpec) + "methods:\n  - {type: test_probe, scale: 3.0}\n";
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(yaml, "m.yaml"), "m.yaml:8:", "methods[0].scale");
    CHECK(loadSpecFromString(test::kSmallRunSpec, "p.yaml").methods.empty());
  }

  TEST_CASE("a run calls the hooks in order and writes the method's section of the result file") {
    events().clear();
    const TrainOutcome out = Trainer(probeSpec({"train.max_steps=2"})).run("");
    CHECK(events() == std::vector<std::string>{"setUp", "begin", "epoch 1 fresh", "before step 0", "after step 0",
                                               "before step 1", "after step 1", "end of epoch 1", "afterTraining"});
    CHECK(out.result["methods"]["test_probe"]["batches"] == 2);
    CHECK(out.result["spec"]["methods"][0]["type"] == "test_probe");
  }

  TEST_CASE("soft targets and the loss, as a method makes them") {
    const auto run = [](std::vector<std::string> sets) {
      sets.push_back("train.max_steps=1");
      return Trainer(probeSpec(sets)).run("");
    };
    const TrainOutcome plain = run({}), soft = run({"methods[0].soft=true"}), doubled = run({"methods[0].scale=2.0"});
    const auto& p = plain.result["epochs"][0];
    // One-hot soft targets train as the labels do (the cross-entropy's two forms, to rounding).
    CHECK(soft.result["epochs"][0]["train_loss"].get<double>() == doctest::Approx(p["train_loss"].get<double>()).epsilon(1e-6));
    CHECK(soft.result["epochs"][0]["train_top1"] == p["train_top1"]);
    CHECK(test::maxParameterDiff(*plain.model, *soft.model) < 1e-5);
    // A loss doubled by the method doubles the gradients (exactly: a power of two).
    CHECK(doubled.result["epochs"][0]["grad_norm"].get<double>() == 2 * p["grad_norm"].get<double>());
  }

  TEST_CASE("a method's state goes into checkpoints and comes back on resume; unknown state is refused") {
    TempDir tmp;
    const std::vector<std::string> sets{"train.max_steps=4", "output.checkpoint.every_steps=2", "output.tensorboard=false"};
    events().clear();
    Trainer(probeSpec(sets)).run(tmp.file("a/p.json"));
    const std::string step2 = tmp.file("a/p.ckpt/step-000000002");
    REQUIRE(std::filesystem::exists(step2));
    events().clear();
    Trainer resumed(probeSpec(sets));
    resumed.setResume(ResumeRequest{step2, false});
    const TrainOutcome out = resumed.run(tmp.file("b/p.json"));
    REQUIRE(events().size() >= 4);
    CHECK(events()[0] == "setUp");
    CHECK(events()[1] == "restore {\"batches\":2}");  // before the tensors, after set-up
    CHECK(events()[2] == "begin");
    CHECK(events()[3] == "epoch 1 resumed");
    CHECK(out.result["methods"]["test_probe"]["batches"] == 4);
    // The same checkpoint for a spec without the method: its state would be lost.
    Trainer without(loadSpecFromString(test::kSmallRunSpec, "p.yaml", sets));
    without.setResume(ResumeRequest{step2, true});
    CHECK_THROWS_CONTAINING(CheckpointError, without.run(tmp.file("c/p.json")), "method 'test_probe'",
                            "does not list");
  }
}
