// Purpose: FLOPs counted from dispatched operators — resnet18 and resnet50 at 224² give the
// published forward cost (1.82 and 4.11 GMACs, within 2 %), small_cnn's count equals the one
// worked out by hand from its layer shapes, forward and backward; a training step costs about
// three forwards; the peak-FLOP/s cache.
#include "runner/api/Model.h"
#include "runner/metrics/Flops.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace exprun;

namespace {
std::shared_ptr<Model> makeModel(const std::string& type, DataInfo info, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> sets{"model.type=" + type};
  sets.insert(sets.end(), extra.begin(), extra.end());
  Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "s.yaml", sets);
  return registry<ModelKind>().get(s.model.type())(s.model, info);
}

double forwardFlops(Model& m, std::int64_t size) {
  torch::NoGradGuard noGrad;
  m.eval();
  torch::Tensor x = torch::zeros({1, 3, size, size});
  FlopCounter counter;
  m.forward(x);
  return counter.flops();
}
}  // namespace

TEST_SUITE("flops") {
  TEST_CASE("resnet18 and resnet50 at 224x224: the published forward GMACs") {
    struct Published {
      const char* name;
      double gmacs;
    };
    for (const Published& p : {Published{"resnet18", 1.82}, Published{"resnet50", 4.11}}) {
      CAPTURE(p.name);
      auto m = makeModel(p.name, DataInfo{3, 224, 224, 1000});
      const double gmacs = forwardFlops(*m, 224) / 2 / 1e9;
      CAPTURE(gmacs);
      CHECK(std::abs(gmacs / p.gmacs - 1) < 0.02);
    }
  }

  TEST_CASE("small_cnn: the count worked out from its layers, forward and backward") {
    auto m = makeModel("small_cnn", DataInfo{1, 28, 28, 10}, {"model.width=16", "model.hidden=256"});
    // conv 1->16 3x3 at 28x28, conv 16->32 3x3 at 14x14, linear 32*7*7 -> 256, linear 256 -> 10 (MACs)
    const double conv1 = 28 * 28 * 16 * 1 * 9, conv2 = 14 * 14 * 32 * 16 * 9, fc1 = 32 * 7 * 7 * 256, fc2 = 256 * 10;
    const double forward = 2 * (conv1 + conv2 + fc1 + fc2);
    const StepFlops f = countStepFlops(*m, 1, 28, 28, [&](torch::Tensor x) { return m->forward(x); });
    CHECK(f.forward == forward);
    // backward: input and weight gradients of every layer (2x forward), except the first
    // convolution's input gradient (the image needs none)
    CHECK(f.total == 3 * forward - 2 * conv1);
    for (const auto& p : m->parameters()) CHECK_FALSE(p.grad().defined());  // the count leaves no gradients
  }

  TEST_CASE("a resnet18 training step costs about three forwards; nothing is counted outside a counter") {
    auto m = makeModel("resnet18", DataInfo{3, 64, 64, 10});
    const StepFlops f = countStepFlops(*m, 3, 64, 64, [&](torch::Tensor x) { return m->forward(x); });
    CHECK(f.total / f.forward > 2.9);
    CHECK(f.total / f.forward < 3.0);
    {
      FlopCounter c;
      CHECK_THROWS_AS(FlopCounter(), std::logic_error);  // one at a time
    }
    FlopCounter after;
    torch::mm(torch::ones({4, 5}), torch::ones({5, 6}));
    CHECK(after.flops() == 2 * 4 * 5 * 6);
  }

  TEST_CASE("a measured peak is cached only when two measurements agree within 5 % on an idle machine") {
    CHECK(steadyEnoughToCache(100, 104, 0.2, 2));
    CHECK(steadyEnoughToCache(104, 100, 0.2, 2));
    CHECK_FALSE(steadyEnoughToCache(100, 110, 0.2, 2));  // 9 % apart
    CHECK_FALSE(steadyEnoughToCache(100, 100, 2.0, 2));  // two busy cores
    CHECK(steadyEnoughToCache(100, 100, 2.0, 16));       // two busy of sixteen
    CHECK_FALSE(steadyEnoughToCache(0, 0, 0, 2));
  }

  TEST_CASE("peak FLOP/s: cached when steady, read from the cache; a corrupt cache is measured again") {
    const std::string dir = (std::filesystem::temp_directory_path() / ("exprun-peak-" + std::to_string(::getpid()))).string();
    std::filesystem::remove_all(dir);
    ::setenv("EXPRUN_CACHE_DIR", dir.c_str(), 1);
    const PeakFlops first = peakFlops(torch::Device(torch::kCPU), torch::kFloat);
    CHECK_FALSE(first.cached);
    CHECK(first.flopsPerS > 1e8);
    CHECK(std::filesystem::exists(dir + "/peak_flops.json") == first.cacheable);
    if (first.cacheable) {
      const PeakFlops second = peakFlops(torch::Device(torch::kCPU), torch::kFloat);
      CHECK(second.cached);
      CHECK(second.flopsPerS == first.flopsPerS);
    }
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/peak_flops.json") << nlohmann::json{{first.key, 123e9}}.dump();
    const PeakFlops cached = peakFlops(torch::Device(torch::kCPU), torch::kFloat);
    CHECK(cached.cached);
    CHECK(cached.flopsPerS == 123e9);
    std::ofstream(dir + "/peak_flops.json") << "{not json";
    CHECK_FALSE(peakFlops(torch::Device(torch::kCPU), torch::kFloat).cached);
    ::unsetenv("EXPRUN_CACHE_DIR");
    std::filesystem::remove_all(dir);
  }
}
