// Purpose: the `stochastic_depth` method: with rate 0 a model computes what it did; with a rate the
// training forward changes, draws from (seed, step, micro-batch) only, and evaluation does not; a
// model that adds no residual through a batch norm is refused; a run with it trains.
#include <cmath>

#include "runner/api/Model.h"
#include "runner/train/Trainer.h"

#include "tests/MethodUtil.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {

// A method context that has the model (what stochastic_depth asks for).
class ModelContext : public test::SpecOnlyContext {
 public:
  ModelContext(Spec spec, DataInfo info, Model& model) : SpecOnlyContext(std::move(spec), info), info_(info), model_(model) {}
  Model& model() override { return model_; }
  std::shared_ptr<Model> freshModel() override { return registry<ModelKind>().get(spec().model.type())(spec().model, info_); }

 private:
  DataInfo info_;
  Model& model_;
};

const DataInfo kInfo{3, 16, 16, 10};

Spec depthSpec(const std::string& model, double rate) {
  return loadSpecFromString("name: t\nseed: 7\nmodel: {type: " + model +
                                "}\ndata: {type: synthetic, channels: 3, height: 16, width: 16, num_classes: 10}\n"
                                "methods: [{type: stochastic_depth, rate: " + std::to_string(rate) + "}]\n",
                            "s.yaml", model == "resnet18" ? std::vector<std::string>{"model.small_input_stem=true"}
                                                          : std::vector<std::string>{});
}

std::shared_ptr<Model> freshModel(const Spec& s) {
  torch::manual_seed(3);
  return registry<ModelKind>().get(s.model.type())(s.model, kInfo);
}

torch::Tensor input() {
  torch::manual_seed(4);
  return torch::randn({8, 3, 16, 16});
}

// The model's output after the method saw the batch of optimizer step `step`.
torch::Tensor outputAt(Method& m, Model& model, std::int64_t step) {
  StepBatch b;
  b.step = step;
  m.onBatch(b);
  torch::NoGradGuard noGrad;
  return model.forward(input());
}

// The same model twice, the method set up on `with`, both in training or evaluation mode; `plain`
// is the model without the method.
struct Pair {
  std::shared_ptr<Model> plain, with;
  std::unique_ptr<ModelContext> context;
  std::unique_ptr<Method> method;
  Pair(const Spec& s, bool training) : plain(freshModel(s)), with(freshModel(s)) {
    context = std::make_unique<ModelContext>(s, kInfo, *with);
    method = test::methodOf(*context);
    plain->train(training);
    with->train(training);
  }
  torch::Tensor plainOutput() const {
    torch::NoGradGuard noGrad;
    return plain->forward(input());
  }
};

}  // namespace

TEST_SUITE("stochastic_depth") {
  TEST_CASE("with rate 0 the model computes what it did without the method") {
    for (const char* name : {"resnet18", "mobilenet_v2"}) {
      CAPTURE(name);
      Pair p(depthSpec(name, 0.0), /*training=*/true);
      CHECK(torch::equal(p.plainOutput(), outputAt(*p.method, *p.with, 0)));
    }
  }

  TEST_CASE("a rate changes the training forward, by (seed, step, micro-batch) only, and not evaluation") {
    for (const char* name : {"resnet18", "mobilenet_v2"}) {
      CAPTURE(name);
      const Spec s = depthSpec(name, 0.5);
      Pair p(s, /*training=*/true);
      const torch::Tensor plainOut = p.plainOutput(), at3 = outputAt(*p.method, *p.with, 3);
      CHECK_FALSE(torch::allclose(plainOut, at3));
      CHECK(torch::equal(at3, outputAt(*p.method, *p.with, 3)));       // the same draws again
      CHECK_FALSE(torch::equal(at3, outputAt(*p.method, *p.with, 4)));  // another step, others
      // Evaluation (fresh models: the training forwards above moved the running statistics).
      Pair e(s, /*training=*/false);
      CHECK(torch::equal(e.plainOutput(), outputAt(*e.method, *e.with, 3)));
    }
  }

  TEST_CASE("a model with no residual added through a batch norm is refused; a run with the method trains") {
    const Spec bad = loadSpecFromString(
        "name: t\nmodel: {type: small_cnn, batch_norm: true}\ndata: {type: synthetic, channels: 1, height: 28, width: 28}\n"
        "methods: [{type: stochastic_depth}]\n",
        "s.yaml");
    auto model = registry<ModelKind>().get("small_cnn")(bad.model, DataInfo{1, 28, 28, 10});
    ModelContext context(bad, DataInfo{1, 28, 28, 10}, *model);
    CHECK_THROWS_CONTAINING(std::invalid_argument, test::methodOf(context), "no residual");
    const Spec run = loadSpecFromString(
        "name: t\nseed: 1\nmodel: {type: resnet18, small_input_stem: true}\n"
        "data: {type: synthetic, channels: 3, height: 16, width: 16, num_classes: 10, train_size: 64, test_size: 32}\n"
        "optimizer: {type: sgd, lr: 0.05}\n"
        "train: {epochs: 1, batch_size: 16, threads: 1, workers: 1, log_every: 0, eval: true}\n"
        "methods: [{type: stochastic_depth, rate: 0.2}]\n",
        "s.yaml");
    const TrainOutcome out = Trainer(run).run("");
    CHECK(out.status == "completed");
    REQUIRE(out.result["epochs"].size() == 1);
    CHECK(std::isfinite(out.result["epochs"][0]["train_loss"].get<double>()));
  }
}
