// Purpose: activation recomputation (runner/nn/Recompute.h; the spec's
// train.activation_checkpointing): recomputed stages give the gradients of stored ones, the stage
// runs again in backward with the same random draws, and a training run is unchanged by it.
#include "runner/api/Model.h"
#include "runner/spec/Spec.h"
#include "runner/train/Trainer.h"
#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

using namespace exprun;

using exprun::test::maxParameterDiff;
using exprun::test::trainSmallRun;

TEST_SUITE("recompute") {
  TEST_CASE("recomputed stages give the same gradients") {
    Spec s = loadSpecFromString("name: t\nmodel: {type: resnet18, small_input_stem: true}\ndata: {type: synthetic}\n", "s.yaml");
    auto grads = [&](std::vector<std::string> stages, std::int64_t every = 0) {
      torch::manual_seed(3);
      auto m = registry<ModelKind>().get("resnet18")(s.model, DataInfo{3, 16, 16, 10});
      m->train();
      m->setRecomputed(stages, every);
      torch::Generator g = torch::make_generator<torch::CPUGeneratorImpl>(9);
      auto x = torch::randn({4, 3, 16, 16}, g);
      torch::nn::functional::cross_entropy(m->forward(x), torch::tensor({1, 2, 3, 4}, torch::kInt64)).backward();
      std::vector<torch::Tensor> out;
      for (auto& p : m->parameters()) out.push_back(p.grad().clone());
      return out;
    };
    const std::vector<std::string> every{"layer1", "layer2", "layer3", "layer4"};
    auto plain = grads({});
    // whole stages; all stages at once; block by block (resnet18: two blocks a stage)
    for (const auto& other : {grads({"layer2", "layer3"}), grads(every), grads(every, 1), grads({"layer2"}, 1)}) {
      REQUIRE(plain.size() == other.size());
      double worst = 0;
      for (size_t i = 0; i < plain.size(); ++i) {
        double scale = std::max(1e-6, plain[i].abs().max().item<double>());
        worst = std::max(worst, (plain[i] - other[i]).abs().max().item<double>() / scale);
      }
      CHECK(worst <= 1e-6);
    }
  }

  TEST_CASE("the stage function runs again in backward, with the same dropout mask") {
    struct Counting : Model {
      int calls = 0;
      torch::Tensor w = register_parameter("w", torch::ones({8}));
      torch::Tensor forward(torch::Tensor x) override {
        return stage("body", [this](torch::Tensor t) {
          ++calls;
          return torch::dropout(t * w, 0.5, true);
        }, x);
      }
      std::vector<std::string> stages() const override { return {"body"}; }
    };
    auto run = [](bool ckpt) {
      auto m = std::make_shared<Counting>();
      m->train();
      if (ckpt) m->setRecomputed({"body"});
      torch::manual_seed(1);
      m->forward(torch::ones({8})).sum().backward();
      return std::make_pair(m->calls, m->w.grad().clone());
    };
    auto [plainCalls, plainGrad] = run(false);
    auto [ckptCalls, ckptGrad] = run(true);
    CHECK(plainCalls == 1);
    CHECK(ckptCalls == 2);
    CHECK(torch::equal(plainGrad, ckptGrad));  // RNG restored: same dropout mask in the recomputation
  }

  TEST_CASE("a training run with recomputed stages and accumulation matches one without") {
    auto plain = trainSmallRun({"train.batch_size=32", "train.accumulate=2"});
    auto ckpt = trainSmallRun({"train.batch_size=32", "train.accumulate=2", "train.activation_checkpointing=[all]"});
    CHECK(ckpt.result["provenance"]["checkpointed_stages"].size() == 2);
    CHECK(maxParameterDiff(*plain.model, *ckpt.model) <= 1e-6);
    CHECK_THROWS_CONTAINING(std::invalid_argument, trainSmallRun({"train.activation_checkpointing=[layer9]"}),
                            "has no stage 'layer9'", "valid: features, classifier, all, none");
  }
}
