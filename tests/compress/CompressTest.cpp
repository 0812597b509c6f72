// Purpose: structured channel pruning and int8 quantization (plugins/methods/compress/; the channel groups: runner/compress/Channels.h): every model's
// graph computes its forward; removing channels equals zeroing them in the full model; residual,
// depthwise and flatten groups stay consistent; two ranks keep the same channels; int8 logits stay
// close to float ones on the quantized kernels; fake quantization follows the int8 kernels and
// trains the float parameters; bad prune and int8 methods are refused with the key path.
#include <mutex>

#include "plugins/methods/compress/Prune.h"
#include "plugins/methods/compress/Quantize.h"
#include "runner/metrics/Hardware.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"
#include "tests/TwoRanks.h"

using namespace exprun;
using namespace exprun::test;

namespace {

Spec specFor(const std::string& model, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets{"model.type=" + model};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic, channels: 1, height: 28, "
                            "width: 28, num_classes: 10}\n",
                            "s.yaml", sets);
}

// Calibration batches: `n` batches of 16 random 28x28 images, drawn as they are asked for.
std::function<std::optional<torch::Tensor>()> randomBatches(int n) {
  return [left = n]() mutable -> std::optional<torch::Tensor> {
    if (left-- == 0) return std::nullopt;
    return torch::randn({16, 1, 28, 28});
  };
}

// A spec whose methods are `methods` (YAML flow: "[{type: prune, ratio: 0.5}]").
Spec methodsSpec(const std::string& model, const std::string& methods, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets{"methods=" + methods};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return specFor(model, sets);
}

// The pruner of the spec's first method (a prune method).
ChannelPruner prunerOf(const Spec& s, Model& m, const std::vector<std::int64_t>& image) {
  return ChannelPruner(readPruneSettings(s.methods.at(0), "methods[0]"), s.model.type(), m, image);
}

std::shared_ptr<Model> build(const Spec& s) { return registry<ModelKind>().get(s.model.type())(s.model, DataInfo{1, 28, 28, 10}); }

// Batch-norm statistics and scales that are not the initial ones, so folding and zeroing matter.
void randomizeNorms(Model& m) {
  torch::NoGradGuard g;
  for (auto& mod : m.modules(false))
    if (auto* bn = mod->as<torch::nn::BatchNorm2d>()) {
      bn->weight.uniform_(0.5, 1.5);
      bn->bias.uniform_(-0.2, 0.2);
      bn->running_mean.uniform_(-0.1, 0.1);
      bn->running_var.uniform_(0.5, 1.5);
    }
}

const ChannelGroup& groupNamed(const ChannelMap& m, const std::string& name) {
  for (const auto& g : m.groups)
    if (g.name == name) return g;
  FAIL("no group " << name);
  return m.groups.front();
}

const std::vector<std::int64_t> kImage{1, 28, 28};

}  // namespace

TEST_SUITE("compress") {
  TEST_CASE("every model's graph computes what its forward computes") {
    for (const auto& [type, extra] :
         std::vector<std::pair<std::string, std::vector<std::string>>>{{"small_cnn", {}},
                                                                         {"small_cnn", {"model.fused=false"}},
                                                                         {"small_cnn", {"model.batch_norm=false"}},
                                                                         {"resnet18", {}},
                                                                         {"resnet18", {"model.small_input_stem=true"}},
                                                                         {"resnet50", {}},
                                                                         {"mobilenet_v2", {}}}) {
      CAPTURE(type);
      torch::manual_seed(1);
      auto m = build(specFor(type, extra));
      randomizeNorms(*m);
      m->eval();
      torch::NoGradGuard g;
      const torch::Tensor x = torch::randn({3, 1, 28, 28});
      CHECK(torch::allclose(m->graph().run(x), m->forward(x), 1e-4, 1e-5));
    }
  }

  TEST_CASE("removing a conv + BN pair's channels equals zeroing them in the full model") {
    torch::manual_seed(2);
    auto pruned = build(specFor("small_cnn", {"model.fused=false", "model.width=8"}));
    randomizeNorms(*pruned);
    pruned->eval();
    auto full = build(specFor("small_cnn", {"model.fused=false", "model.width=8"}));
    {
      torch::NoGradGuard g;
      auto src = pruned->named_parameters(), dst = full->named_parameters();
      for (const auto& p : src) dst[p.key()].copy_(p.value());
      auto bs = pruned->named_buffers(), bd = full->named_buffers();
      for (const auto& b : bs) bd[b.key()].copy_(b.value());
    }
    full->eval();
    const std::vector<std::int64_t> keep{0, 2, 3, 6};  // hand-chosen channels of the first conv
    const ChannelMap map = mapChannels(*pruned, kImage);
    const ChannelGroup& first = groupNamed(map, "features.0");
    CHECK(first.producers.size() == 1);
    CHECK(first.norms.size() == 1);
    CHECK(first.readers.size() == 1);
    keepChannels(map, first, keep);
    {  // the full model with the other channels' filters zeroed and their BN output shifted to 0
      torch::NoGradGuard g;
      auto p = full->named_parameters();
      for (std::int64_t c : {1, 4, 5, 7}) {
        p["features.0.weight"][c].zero_();
        p["features.1.weight"][c].zero_();
        p["features.1.bias"][c].zero_();
      }
    }
    CHECK(pruned->named_parameters()["features.0.weight"].size(0) == 4);
    CHECK(pruned->named_parameters()["features.4.weight"].size(1) == 4);
    CHECK(pruned->named_buffers()["features.1.running_var"].size(0) == 4);
    torch::NoGradGuard g;
    const torch::Tensor x = torch::randn({5, 1, 28, 28});
    CHECK(torch::allclose(pruned->forward(x), full->forward(x), 1e-5, 1e-6));
  }

  TEST_CASE("residual, depthwise and flatten groups stay consistent") {
    torch::manual_seed(3);
    auto r = build(specFor("resnet18"));
    const ChannelMap map = mapChannels(*r, kImage);
    const ChannelGroup& stem = groupNamed(map, "conv1");  // the stem and layer1's residual stream
    CHECK(stem.residual());
    CHECK(stem.producers.size() == 3);  // conv1, layer1.0.conv2, layer1.1.conv2
    CHECK(stem.readers.size() == 4);    // layer1.{0,1}.conv1, layer2.0.conv1, layer2.0.downsample.0
    CHECK(map.groups.size() == 12);     // 8 inner groups, 4 stage streams
    Spec s = methodsSpec("resnet18", "[{type: prune, ratio: 0.5}]", {"train.epochs=1"});
    ChannelPruner pruner = prunerOf(s, *r, kImage);
    Dist single;
    const PruneOutcome o = pruner.prune(*r, 1, single);
    CHECK(o.after.at("conv1") == 32);
    CHECK(o.after.at("layer4.0.downsample.0") == 256);  // the stream is named after its first producer
    CHECK(o.after.at("layer4.0.conv1") == 256);
    auto p = r->named_parameters();
    for (const char* k : {"conv1.weight", "layer1.0.conv2.weight", "layer1.1.conv2.weight"}) CHECK(p[k].size(0) == 32);
    for (const char* k : {"layer1.0.conv1.weight", "layer2.0.conv1.weight", "layer2.0.downsample.0.weight"})
      CHECK(p[k].size(1) == 32);
    CHECK(p["fc.weight"].size(1) == 256);
    torch::NoGradGuard g;
    CHECK(r->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});

    auto mb = build(specFor("mobilenet_v2"));
    const ChannelMap mm = mapChannels(*mb, kImage);
    // the stem (with features.1's depthwise conv), 16 expansions, 7 stages' projections, the 1280 head
    CHECK(mm.groups.size() == 25);
    const ChannelGroup& expand = groupNamed(mm, "features.2.conv.0.0");
    CHECK(expand.depthwise.size() == 1);
    CHECK(expand.norms.size() == 2);
    keepChannels(mm, expand, {0, 5, 9});
    auto mp = mb->named_parameters();
    CHECK(mp["features.2.conv.1.0.weight"].size(0) == 3);
    CHECK(mb->named_modules()["features.2.conv.1.0"]->as<torch::nn::Conv2d>()->options.groups() == 3);
    CHECK(mb->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});

    auto cnn = build(specFor("small_cnn", {"model.width=8"}));
    const ChannelMap cm = mapChannels(*cnn, kImage);
    const ChannelGroup& last = groupNamed(cm, "features.4");
    CHECK(last.spans.begin()->second == 49);  // a 7x7 map flattened into classifier.0
    keepChannels(cm, last, {1, 2, 3});
    CHECK(cnn->named_parameters()["classifier.0.weight"].size(1) == 3 * 49);
    CHECK(cnn->forward(torch::randn({2, 1, 28, 28})).sizes() == torch::IntArrayRef{2, 10});
  }

  TEST_CASE("a depthwise group keeps two channels; an unreachable FLOPs target is refused before training") {
    Spec s = methodsSpec("mobilenet_v2", "[{type: prune, ratio: 0.95, round_to: 1}]", {"model.width_mult=0.5", "train.epochs=1"});
    auto m = build(s);
    ChannelPruner pruner = prunerOf(s, *m, kImage);
    Dist single;
    const PruneOutcome o = pruner.prune(*m, 1, single);
    CHECK(o.after.at("features.0.0") == 2);          // 16 channels * 5 % = 0.8 -> 1, but a depthwise group keeps 2
    CHECK(o.after.at("features.2.conv.0.0") == 2);  // 48 * 5 % = 2.4 -> 2
    CHECK(o.after.at("features.1.conv.1") == 1);    // 8 * 5 % = 0.4 -> 1: no depthwise conv on a stage's projections
    auto again = build(s);
    applyWidths(*again, kImage, o.after);  // the same groups are found at the new widths
    Spec tooMuch = methodsSpec("resnet18", "[{type: prune, flops_reduction: 0.9, residual: false, round_to: 64}]",
                               {"train.epochs=1"});
    auto r = build(tooMuch);
    CHECK_THROWS_WITH_AS(prunerOf(tooMuch, *r, kImage), doctest::Contains("methods[0].flops_reduction"),
                         std::invalid_argument);
  }

  TEST_CASE("a FLOPs target is met, widths restore, and graph FLOPs equal exprun's counter") {
    torch::manual_seed(4);
    Spec s = methodsSpec("resnet18", "[{type: prune, flops_reduction: 0.5}]", {"train.epochs=1"});
    auto m = build(s);
    ChannelPruner pruner = prunerOf(s, *m, kImage);
    Dist single;
    const PruneOutcome o = pruner.prune(*m, 1, single);
    CHECK(o.flopsAfter <= 0.5 * pruner.fullWidthFlops());
    CHECK(o.flopsAfter > 0.4 * pruner.fullWidthFlops());
    const double counted = countStepFlops(*m, 1, 28, 28, [&](torch::Tensor x) { return m->forward(x); }).forward;
    CHECK(counted == doctest::Approx(o.flopsAfter).epsilon(1e-9));
    auto again = build(s);
    applyWidths(*again, kImage, o.after);
    for (const auto& p : m->named_parameters()) CHECK(again->named_parameters()[p.key()].sizes() == p.value().sizes());
    CHECK_THROWS_WITH_AS(applyWidths(*again, kImage, {{"layer9.conv", 8}}), doctest::Contains("layer9.conv"),
                         std::invalid_argument);
  }

  TEST_CASE("two ranks keep rank 0's channels") {
    std::map<std::string, std::vector<std::int64_t>> kept[2];
    std::mutex seeding;  // the ranks are threads of one process: one global generator
    onTwoRanks([&](int rank, Dist& dist) {
      Spec s = methodsSpec("small_cnn", "[{type: prune, ratio: 0.5}]", {"train.epochs=1"});
      std::unique_lock<std::mutex> lock(seeding);
      torch::manual_seed(static_cast<std::uint64_t>(10 + rank));  // different weights on each rank
      auto m = build(s);
      lock.unlock();
      ChannelPruner pruner = prunerOf(s, *m, kImage);
      kept[rank] = pruner.prune(*m, 1, dist).kept;
    });
    CHECK(kept[0] == kept[1]);
    torch::manual_seed(11);  // rank 1's weights would choose otherwise
    Spec s = methodsSpec("small_cnn", "[{type: prune, ratio: 0.5}]", {"train.epochs=1"});
    auto m = build(s);
    ChannelPruner pruner = prunerOf(s, *m, kImage);
    Dist single;
    CHECK(pruner.prune(*m, 1, single).kept != kept[0]);
  }

  TEST_CASE("int8 logits stay close to float ones, on int8 kernels") {
    for (const std::string type : {"small_cnn", "resnet18", "mobilenet_v2"}) {
      CAPTURE(type);
      torch::manual_seed(5);
      auto m = build(specFor(type));
      randomizeNorms(*m);
      m->eval();
      Int8Model q(*m, randomBatches(4), Int8Options{});
      torch::NoGradGuard g;
      const torch::Tensor x = torch::randn({8, 1, 28, 28});
      const torch::Tensor f = m->forward(x), i8 = q.forward(x);
      // Tolerance: 10 % of the float logits' range (8-bit activations through up to 20 layers).
      const double range = (f.max() - f.min()).item<double>();
      CHECK((f - i8).abs().max().item<double>() < 0.1 * range);
      CHECK(q.engine() != "");
      bool int8Weights = false;
      for (const auto& [name, t] : q.tensors()) int8Weights |= name.find(".weight") != std::string::npos && t.scalar_type() == torch::kChar;
      CHECK(int8Weights);
      std::int64_t floatBytes = 0;
      for (const auto& p : m->parameters()) floatBytes += p.numel() * 4;
      CHECK(q.bytes() < floatBytes / 3);
    }
  }

  TEST_CASE("fake quantization computes what the int8 model computes, and trains the float parameters") {
    for (const std::string type : {"small_cnn", "resnet18", "mobilenet_v2"}) {
      CAPTURE(type);
      torch::manual_seed(6);
      auto m = build(specFor(type));
      randomizeNorms(*m);
      const Int8Model q(*m, randomBatches(4), Int8Options{!cpuHasVnni()});
      const FakeQuantForward fq(*m, q.grids());
      CHECK(fq.grids().size() == q.grids().size());
      const torch::Tensor x = torch::randn({8, 1, 28, 28});
      torch::Tensor f, i8;
      {
        torch::NoGradGuard g;
        m->eval();
        f = m->forward(x);
        i8 = q.forward(x);
      }
      m->train();
      std::vector<torch::Tensor> stats;
      for (const auto& b : m->buffers()) stats.push_back(b.clone());
      const torch::Tensor sim = fq(x);
      // The simulation follows the int8 kernels' rounding: its logits are the int8 model's but for
      // a few ties and 16-bit sums saturating in MobileNetV2's 8-bit layers (exact to 1e-7 with
      // 7-bit activations, under 6 % of the float model's error with 8-bit ones on an AMX Xeon).
      const double simError = (sim.detach() - i8).abs().mean().item<double>();
      const double floatError = (f - i8).abs().mean().item<double>();
      CAPTURE(simError);
      CAPTURE(floatError);
      // fbgemm's AVX2 kernels (a CPU without AVX-512) round ResNet-18's requantizations otherwise
      // than the simulation in a few more places: 24 % of the float model's error on a 2-core Zen 4
      // VM with AVX2 only, under 10 % with AVX-512.
      const bool avx512 = thisCpu().has("avx512f");
      CAPTURE(avx512);
      CHECK(simError < (avx512 ? 0.1 : 0.3) * floatError);
      // Gradients reach the convolutions, the batch norms' scales and shifts and the linear layers
      // (straight through the rounding); the batch norms' statistics stay frozen.
      sim.pow(2).sum().backward();
      for (const auto& item : m->named_parameters()) {
        CAPTURE(item.key());
        REQUIRE(item.value().grad().defined());
        CHECK(item.value().grad().abs().sum().item<double>() > 0);
      }
      std::size_t i = 0;
      for (const auto& b : m->buffers()) CHECK(torch::equal(b, stats[i++]));
      // A checkpoint's grids of another model are refused.
      std::vector<ActivationGrid> fewer = q.grids();
      fewer.pop_back();
      CHECK_THROWS_WITH_AS(FakeQuantForward(*m, fewer), doctest::Contains("activation grids"), std::invalid_argument);
      // Built on the same grids, the int8 model computes what the calibrated one does.
      const Int8Model again(*m, q.grids());
      torch::NoGradGuard g;
      CHECK(torch::equal(again.forward(x), i8));
    }
  }

  TEST_CASE("bad prune and int8 methods are refused with the key path") {
    const auto bad = [](const std::string& methods, std::vector<std::string> extra = {}) {
      return methodsSpec("small_cnn", methods, extra);
    };
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: prune, ratio: 1.0}]"), "methods[0].ratio");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: prune, ratio: 0.3, flops_reduction: 0.3}]"), "not both");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: prune}]"), "not neither");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: prune, ratio: 0.3, at_epoch: 12}]"), "methods[0].at_epoch");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: int8}]", {"train.device=cuda"}), "train.device is cuda");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: prune, ratio: 0.3, pruner: {type: magnitude}}]"),
                            "methods[0].pruner.type");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: int8, qat_epochs: 3}]", {"train.epochs=3"}), "methods[0].qat_epochs");
    CHECK_THROWS_CONTAINING(SpecError,
                            bad("[{type: prune, ratio: 0.3, at_epoch: 3}, {type: int8, qat_epochs: 2}]", {"train.epochs=4"}),
                            "prune before them");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: int8}, {type: prune, ratio: 0.3}]", {"train.epochs=4"}),
                            "list it first");
    CHECK_THROWS_CONTAINING(SpecError, bad("[{type: int8}, {type: int8}]"), "listed twice");
    CHECK_NOTHROW(bad("[{type: prune, ratio: 0.3, at_epoch: 2}, {type: int8, qat_epochs: 1}]", {"train.epochs=4"}));
  }

  TEST_CASE("a model without a graph has no prunable groups") {
    struct Plain : Model {
      torch::nn::Linear fc{register_module("fc", torch::nn::Linear(4, 2))};
      torch::Tensor forward(torch::Tensor x) override { return fc(x.flatten(1)); }
    } plain;
    Spec s = methodsSpec("small_cnn", "[{type: prune, ratio: 0.3}]", {"train.epochs=1"});
    CHECK_THROWS_WITH_AS(prunerOf(s, plain, {1, 2, 2}), doctest::Contains("methods[0].pruner"), std::invalid_argument);
  }

  TEST_CASE("bn_scale ranks by |gamma| and adds its L1 penalty to the scales' gradients") {
    Spec s = methodsSpec("small_cnn", "[{type: prune, ratio: 0.5, pruner: {type: bn_scale, sparsity: 0.01}}]",
                         {"train.epochs=1"});
    auto pruner = exprun::build<PrunerKind>(s.methods.at(0).child("pruner"));
    torch::Tensor gamma = torch::tensor({0.5, -2.0, 0.1, 1.0});
    GroupTensors t{{torch::ones({4, 3, 3, 3})}, {gamma}};
    CHECK(torch::equal(pruner->importance(t), torch::tensor({0.5, 2.0, 0.1, 1.0})));
    torch::Tensor w = gamma.clone().set_requires_grad(true);
    w.mutable_grad() = torch::zeros({4});
    pruner->penalize({w});
    CHECK(torch::allclose(w.grad(), torch::tensor({0.01, -0.01, 0.01, 0.01})));
    GroupTensors noNorm{{torch::tensor({1.0, -3.0}).view({2, 1})}, {}};  // a linear group: the filters' L1 norm
    CHECK(torch::equal(pruner->importance(noNorm), torch::tensor({1.0, 3.0})));
  }
}
