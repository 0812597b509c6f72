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
// Five steps of `plugin` on model `a` and of `reference` on its twin `b` (same weights), on inputs
// and dropout masks drawn alike on `device`.
void stepTwins(Model& a, Model& b, torch::optim::Optimizer& plugin, torch::optim::Optimizer& reference,
               const torch::Device& device) {
  for (int step = 0; step < 5; ++step) {
    torch::manual_seed(100 + step);
    const torch::Tensor x = torch::randn({3, 1, 28, 28}).to(device);
    a.zero_grad();
    b.zero_grad();
    torch::manual_seed(200 + step);  // the same dropout masks
    a.forward(x).square().mean().backward();
    torch::manual_seed(200 + step);
    b.forward(x).square().mean().backward();
    plugin.step();
    reference.step();
  }
}
// Five steps of the adamw plugin (impl `impl`) on `device` against torch::optim::AdamW's on a twin
// model: parameters within 1e-5 (relative), the state's step count 5.
void checkFusedAdamW(const torch::Device& device, const std::string& impl) {
  Spec s = spec({"optimizer.type=adamw", "optimizer.weight_decay=0.05", "optimizer.impl=" + impl});
  torch::manual_seed(3);
  auto a = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
  torch::manual_seed(3);
  auto b = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
  a->to(device);
  b->to(device);
  auto plugin = registry<OptimizerKind>().get("adamw")(s.optimizer, trainableParameters(*a), 1e-3);
  auto base = torch::optim::AdamWOptions(1e-3).betas({0.9, 0.999}).eps(1e-8);
  torch::optim::AdamW reference(weightDecayGroups(trainableParameters(*b), base, 0.05, false), base);
  const auto pa = a->parameters(), pb = b->parameters();
  stepTwins(*a, *b, plugin->torchOptimizer(), reference, device);
  for (std::size_t i = 0; i < pa.size(); ++i) {
    REQUIRE(torch::isfinite(pa[i]).all().item<bool>());
    const double rel = ((pa[i] - pb[i]).norm() / pb[i].norm().clamp_min(1e-12)).item<double>();
    CHECK(rel < 1e-5);
    const auto& st = static_cast<torch::optim::AdamWParamState&>(*plugin->torchOptimizer().state().at(pa[i].unsafeGetTensorImpl()));
    CHECK(st.step() == 5);
  }
}
}  // namespace

TEST_SUITE("optimizers") {
  TEST_CASE("sgd exempts biases and norm weights from weight decay when asked") {
    Spec s = spec({"optimizer.decay_norm_and_bias=false", "optimizer.weight_decay=0.01"});
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    auto opt = registry<OptimizerKind>().get("sgd")(s.optimizer, trainableParameters(*m), 0.3);
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
    auto opt = registry<OptimizerKind>().get("adamw")(s.optimizer, trainableParameters(*m), 1e-3);
    auto before = m->named_parameters()["classifier.3.weight"].clone();
    m->forward(torch::randn({2, 1, 28, 28})).sum().backward();
    opt->torchOptimizer().step();
    CHECK_FALSE(torch::equal(before, m->named_parameters()["classifier.3.weight"]));
    opt->setMomentum(0.8);  // beta1
    CHECK(std::get<0>(static_cast<torch::optim::AdamWOptions&>(opt->torchOptimizer().param_groups()[0].options()).betas()) ==
          0.8);
  }

  TEST_CASE("sgd's foreach step gives torch::optim::SGD's bits on the CPU") {
    for (const std::string nesterov : {"false", "true"}) {
      CAPTURE(nesterov);
      Spec s = spec({"optimizer.decay_norm_and_bias=false", "optimizer.weight_decay=0.01", "optimizer.nesterov=" + nesterov,
                     "optimizer.impl=foreach"});
      torch::manual_seed(3);
      auto a = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
      torch::manual_seed(3);
      auto b = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
      auto plugin = registry<OptimizerKind>().get("sgd")(s.optimizer, trainableParameters(*a), 0.3);
      auto base = torch::optim::SGDOptions(0.3).momentum(0.9).nesterov(nesterov == "true");
      torch::optim::SGD reference(weightDecayGroups(trainableParameters(*b), base, 0.01, false), base);
      const auto pa = a->parameters(), pb = b->parameters();
      REQUIRE(pa.size() == pb.size());
      for (int step = 0; step < 4; ++step) {
        torch::manual_seed(100 + step);
        const torch::Tensor x = torch::randn({3, 1, 28, 28});
        a->zero_grad();
        b->zero_grad();
        torch::manual_seed(200 + step);  // the same dropout masks
        a->forward(x).square().mean().backward();
        torch::manual_seed(200 + step);
        b->forward(x).square().mean().backward();
        if (step == 2) pa[0].mutable_grad().reset(), pb[0].mutable_grad().reset();  // a parameter without a gradient
        plugin->torchOptimizer().step();
        reference.step();
        for (std::size_t i = 0; i < pa.size(); ++i) REQUIRE(torch::equal(pa[i], pb[i]));
      }
      for (std::size_t i = 0; i < pa.size(); ++i) {
        auto& sa = static_cast<torch::optim::SGDParamState&>(*plugin->torchOptimizer().state().at(pa[i].unsafeGetTensorImpl()));
        auto& sb = static_cast<torch::optim::SGDParamState&>(*reference.state().at(pb[i].unsafeGetTensorImpl()));
        CHECK(torch::equal(sa.momentum_buffer(), sb.momentum_buffer()));
      }
    }
  }

  TEST_CASE("sgd's fused CUDA step agrees with torch::optim::SGD's (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    Spec s = spec({"optimizer.decay_norm_and_bias=false", "optimizer.weight_decay=0.01", "optimizer.nesterov=true",
                   "optimizer.impl=fused"});
    torch::manual_seed(3);
    auto a = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    torch::manual_seed(3);
    auto b = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    a->to(torch::kCUDA);
    b->to(torch::kCUDA);
    auto plugin = registry<OptimizerKind>().get("sgd")(s.optimizer, trainableParameters(*a), 0.3);
    auto base = torch::optim::SGDOptions(0.3).momentum(0.9).nesterov(true);
    torch::optim::SGD reference(weightDecayGroups(trainableParameters(*b), base, 0.01, false), base);
    const auto pa = a->parameters(), pb = b->parameters();
    stepTwins(*a, *b, plugin->torchOptimizer(), reference, torch::kCUDA);
    for (std::size_t i = 0; i < pa.size(); ++i) {
      const double rel = ((pa[i] - pb[i]).norm() / pb[i].norm().clamp_min(1e-12)).item<double>();
      CHECK(rel < 1e-5);
    }
  }

  TEST_CASE("adamw's fused step (ATen's CPU kernel) agrees with torch::optim::AdamW's, from the first step on") {
    checkFusedAdamW(torch::kCPU, "fused");
  }

  TEST_CASE("adamw's fused CUDA step agrees with torch::optim::AdamW's (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    checkFusedAdamW(torch::kCUDA, "auto");
  }

  TEST_CASE("sgd's fused step on the CPU (ATen's CPU kernel) agrees with torch::optim::SGD's") {
    auto stepped = [](const std::string& impl) {
      Spec s = spec({"optimizer.impl=" + impl, "optimizer.weight_decay=0.01", "optimizer.nesterov=true"});
      torch::manual_seed(3);
      auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
      auto plugin = registry<OptimizerKind>().get("sgd")(s.optimizer, trainableParameters(*m), 0.3);
      for (int step = 0; step < 4; ++step) {
        torch::manual_seed(100 + step);
        const torch::Tensor x = torch::randn({3, 1, 28, 28});
        m->zero_grad();
        torch::manual_seed(200 + step);
        m->forward(x).square().mean().backward();
        plugin->torchOptimizer().step();
      }
      return m->parameters();
    };
    const auto fused = stepped("fused"), reference = stepped("per_param");
    for (std::size_t i = 0; i < fused.size(); ++i)
      CHECK(((fused[i] - reference[i]).norm() / reference[i].norm().clamp_min(1e-12)).item<double>() < 1e-5);
  }

  TEST_CASE("nesterov without momentum is refused") {
    Spec s = spec({"optimizer.nesterov=true", "optimizer.momentum=0"});
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    CHECK_THROWS_AS(registry<OptimizerKind>().get("sgd")(s.optimizer, trainableParameters(*m), 0.1), std::invalid_argument);
  }
}
