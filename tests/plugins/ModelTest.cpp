// Purpose: models match torchvision — parameter counts, state-dict sizes and key names (golden
// numbers from torchvision 0.26: len(state_dict()) and total state elements) — and forward shapes.
#include "runner/api/Model.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
std::shared_ptr<Model> buildNamed(const std::string& type, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets{"model.type=" + type};
  sets.insert(sets.end(), extra.begin(), extra.end());
  Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "s.yaml", sets);
  DataInfo info{3, 224, 224, 1000};
  return registry<ModelKind>().get(s.model.type())(s.model, info);
}
std::int64_t stateElements(Model& m) {
  std::int64_t n = 0;
  for (const auto& p : m.named_parameters()) n += p.value().numel();
  for (const auto& b : m.named_buffers()) n += b.value().numel();
  return n;
}
}  // namespace

TEST_SUITE("models") {
  TEST_CASE("ResNets have torchvision's parameter counts and state dicts") {
    struct Golden {
      const char* name;
      std::int64_t params, stateEntries, stateElements;
    };
    for (const Golden& g : {Golden{"resnet18", 11689512, 122, 11699132}, Golden{"resnet34", 21797672, 218, 21814732},
                            Golden{"resnet50", 25557032, 320, 25610205}, Golden{"resnet101", 44549160, 626, 44654608},
                            Golden{"resnet152", 60192808, 932, 60344387}}) {
      CAPTURE(g.name);
      auto m = buildNamed(g.name);
      CHECK(countParameters(*m) == g.params);
      CHECK(static_cast<std::int64_t>(m->named_parameters().size() + m->named_buffers().size()) == g.stateEntries);
      CHECK(stateElements(*m) == g.stateElements);
    }
  }

  TEST_CASE("ResNet module names are torchvision's state-dict keys") {
    auto m = buildNamed("resnet50");
    auto params = m->named_parameters();
    auto buffers = m->named_buffers();
    for (const char* key : {"conv1.weight", "bn1.weight", "layer1.0.conv3.weight", "layer1.0.downsample.0.weight",
                            "layer4.2.bn3.bias", "fc.weight", "fc.bias"})
      CHECK_MESSAGE(params.contains(key), key);
    for (const char* key : {"bn1.running_mean", "layer3.5.bn2.running_var", "layer2.0.downsample.1.num_batches_tracked"})
      CHECK_MESSAGE(buffers.contains(key), key);
    CHECK(params["layer2.0.conv2.weight"].sizes() == torch::IntArrayRef{128, 128, 3, 3});  // stride on the 3x3 (v1.5)
  }

  TEST_CASE("zero_init_residual zeroes the last BN of every block") {
    auto m = buildNamed("resnet18", {"model.zero_init_residual=true"});
    auto params = m->named_parameters();
    CHECK(params["layer1.0.bn2.weight"].abs().sum().item<double>() == 0.0);
    CHECK(params["layer1.0.bn1.weight"].abs().sum().item<double>() > 0.0);
  }

  TEST_CASE("forward shapes, in_channels and num_classes, small-input stem") {
    torch::NoGradGuard g;
    auto m = buildNamed("resnet18", {"model.in_channels=1", "model.num_classes=10", "model.small_input_stem=true"});
    m->eval();
    CHECK(m->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});
    CHECK(m->named_parameters()["conv1.weight"].sizes() == torch::IntArrayRef{64, 1, 3, 3});
    auto r50 = buildNamed("resnet50", {"model.num_classes=7"});
    r50->eval();
    CHECK(r50->forward(torch::randn({1, 3, 64, 64})).sizes() == torch::IntArrayRef{1, 7});
  }

  TEST_CASE("small_cnn takes its shape from the data") {
    Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn, width: 8, hidden: 16}\ndata: {type: fashion_mnist}\n", "s.yaml");
    auto m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    m->eval();
    torch::NoGradGuard g;
    CHECK(m->forward(torch::randn({4, 1, 28, 28})).sizes() == torch::IntArrayRef{4, 10});
    // 1*8*9 + 8+8 (bn) + 8*16*9 + 16+16 + (16*7*7*16 + 16) + (16*10 + 10)
    CHECK(countParameters(*m) == 72 + 16 + 1152 + 32 + 12560 + 170);
  }

  TEST_CASE("small_cnn's fused option: the same training step as libtorch's modules, the same state") {
    auto build = [](const char* fused) {
      Spec s = loadSpecFromString(std::string("name: t\nmodel: {type: small_cnn, width: 8, hidden: 16, dropout: 0, fused: ") +
                                      fused + "}\ndata: {type: fashion_mnist}\n",
                                  "s.yaml");
      torch::manual_seed(5);
      return registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    };
    auto fused = build("true"), plain = build("false");
    torch::manual_seed(6);
    const auto x = torch::randn({16, 1, 28, 28});
    auto yf = fused->forward(x), yp = plain->forward(x);
    CHECK(torch::allclose(yf, yp, 1e-4, 1e-5));
    yf.sum().backward();
    yp.sum().backward();
    const auto pf = fused->named_parameters(), pp = plain->named_parameters();
    for (const auto& p : pp) CHECK(torch::allclose(pf[p.key()].grad(), p.value().grad(), 1e-4, 1e-5));
    const auto bf = fused->named_buffers(), bp = plain->named_buffers();
    REQUIRE(bf.size() == bp.size());  // the same state-dict keys
    for (const auto& b : bp) CHECK(torch::allclose(bf[b.key()].to(torch::kDouble), b.value().to(torch::kDouble), 1e-5, 1e-6));
    // The fused kernel did run (it has no double backward; libtorch's modules do).
    const auto xg = x.clone().requires_grad_(true);
    CHECK_THROWS_WITH(torch::autograd::grad({fused->forward(xg).sum()}, {xg}, {}, true, true),
                      doctest::Contains("no double backward"));
    CHECK_NOTHROW(torch::autograd::grad({plain->forward(xg).sum()}, {xg}, {}, true, true));
  }
}
