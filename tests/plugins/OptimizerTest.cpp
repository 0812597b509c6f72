// Purpose: optimizer plugins — parameter groups, weight-decay exemption, learning-rate setting.
#include "runner/api/Optimizer.h"
#include "runner/spec/Spec.h"
#include "runner/util/Compat.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
Spec spec(const std::vector<std::string>& sets) {
  return loadSpecFromString("name: t\nmodel: {type: small_cnn, width: 4, hidden: 8}\ndata: {type: fashion_mnist}\n", "s.yaml", sets);
}
}  // namespace

TEST_SUITE("optimizers") {
  TEST_CASE("sgd exempts biases and norm weights from weight decay when asked") {
    Spec s = spec({"optimizer.decay_norm_and_bias=false", "optimizer.weight_decay=0.01"});
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    auto opt = registry<OptimizerKind>().get("sgd")(s.optimizer, *m, 0.3);
    auto& groups = opt->torchOptimizer().param_groups();
    REQUIRE(groups.size() == 2);
    auto& g0 = static_cast<torch::optim::SGDOptions&>(groups[0].options());
    auto& g1 = static_cast<torch::optim::SGDOptions&>(groups[1].options());
    CHECK(g0.weight_decay() == doctest::Approx(0.01));
    CHECK(g1.weight_decay() == 0.0);
    for (const auto& p : groups[1].params()) CHECK(p.dim() == 1);
    CHECK(opt->learningRate() == doctest::Approx(0.3));
    opt->setLearningRate(0.05);
    CHECK(g1.lr() == doctest::Approx(0.05));
    opt->setMomentum(0.5);
    CHECK(g0.momentum() == 0.5);
    CHECK(g1.momentum() == 0.5);
  }

  TEST_CASE("adamw builds and steps") {
    Spec s = spec({"optimizer.type=adamw"});
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    auto opt = registry<OptimizerKind>().get("adamw")(s.optimizer, *m, 1e-3);
    auto before = m->named_parameters()["classifier.3.weight"].clone();
    m->forward(torch::randn({2, 1, 28, 28})).sum().backward();
    opt->torchOptimizer().step();
    CHECK_FALSE(torch::equal(before, m->named_parameters()["classifier.3.weight"]));
    opt->setMomentum(0.8);  // beta1
    CHECK(std::get<0>(static_cast<torch::optim::AdamWOptions&>(opt->torchOptimizer().param_groups()[0].options()).betas()) ==
          0.8);
  }

  TEST_CASE("nesterov without momentum is refused") {
    Spec s = spec({"optimizer.nesterov=true", "optimizer.momentum=0"});
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    CHECK_THROWS_AS(registry<OptimizerKind>().get("sgd")(s.optimizer, *m, 0.1), std::invalid_argument);
  }
}
