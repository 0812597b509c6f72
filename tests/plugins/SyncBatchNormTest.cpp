// Purpose: the `sync_batchnorm` method and the synchronized batch norm under it: 2 ranks x B give
// the running statistics, logits and gradients of 1 process x 2B (within 1e-5; without it they
// differ); a 2-rank training run of the binary with batch norm ends with the weights of 1 process x
// 2B and records the allreduces' cost; on one process it is a warning and batch norm as usual.
#include <cstdlib>
#include <mutex>
#include <tuple>

#include "runner/api/Model.h"
#include "runner/nn/SyncBatchNorm.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"
#include "tests/TwoRanks.h"
#include "tests/TrainUtil.h"

using namespace exprun;
using exprun::test::TempDir;

namespace {

std::mutex gBuild;  // the ranks' threads share the default generator: models are built one at a time

std::shared_ptr<Model> buildModel(const std::string& type, torch::ScalarType dtype) {
  std::lock_guard<std::mutex> lock(gBuild);
  torch::manual_seed(5);
  const std::string options = type == "small_cnn" ? ", dropout: 0.0" : "";  // no random masks
  const Spec s = loadSpecFromString("name: t\nmodel: {type: " + type + options + "}\ndata: {type: synthetic}\n", "s.yaml");
  auto m = build<ModelKind>(s.model, DataInfo{1, 28, 28, 10});
  m->to(dtype);
  return m;
}

struct StepResult {
  torch::Tensor logits;
  std::map<std::string, torch::Tensor> grads, buffers;
};

// One training step of `model` on `x`, `y` (mean loss over this rank's images).
StepResult step(Model& model, const torch::Tensor& x, const torch::Tensor& y) {
  model.train();
  StepResult r;
  r.logits = model.forward(x);
  torch::nn::functional::cross_entropy(r.logits, y).backward();
  for (const auto& p : model.named_parameters()) r.grads[p.key()] = p.value().grad().clone();
  for (const auto& b : model.named_buffers()) r.buffers[b.key()] = b.value().clone();
  return r;
}

}  // namespace

TEST_SUITE("sync_batchnorm") {
  TEST_CASE("2 ranks x B synchronized give 1 process x 2B's statistics, logits and gradients") {
    // In float64 the two computations agree to far below 1e-5; in float32 to its rounding over the
    // layers (LibTorch's batch norm sums in float32, the synchronized one in float64).
    for (const auto& [type, dtype, tolerance] : {std::tuple{"small_cnn", torch::kDouble, 1e-5}, std::tuple{"resnet18", torch::kDouble, 1e-5},
                                                 std::tuple{"resnet18", torch::kFloat, 1e-4}}) {
      const std::string model = type;
      CAPTURE(model);
      CAPTURE(dtype);
      torch::manual_seed(9);
      const torch::Tensor x = torch::randn({8, 1, 28, 28}).to(dtype), y = torch::randint(10, {8}, torch::kInt64);
      auto single = buildModel(type, dtype);
      const StepResult want = step(*single, x, y);
      for (bool sync : {true, false}) {
        CAPTURE(sync);
        StepResult got[2];
        SyncCost cost[2];
        test::onTwoRanks([&](int rank, Dist& dist) {
          auto m = buildModel(type, dtype);
          if (sync)
            for (SyncBatchNorm2dImpl* bn : syncBatchNorms(*m)) bn->synchronize(&dist, &cost[rank]);
          got[rank] = step(*m, x.narrow(0, 4 * rank, 4), y.narrow(0, 4 * rank, 4));
          for (auto& [name, g] : got[rank].grads) {  // the gradient reducer's average
            dist.sumInPlace(g);
            g.div_(2);
          }
        });
        double logits = 0, grads = 0, stats = 0;
        for (int r = 0; r < 2; ++r) logits = std::max(logits, (got[r].logits - want.logits.narrow(0, 4 * r, 4)).abs().max().item<double>());
        for (const auto& [name, g] : want.grads)
          grads = std::max(grads, (got[0].grads.at(name) - g).abs().max().item<double>() / std::max(1e-3, g.abs().max().item<double>()));
        for (const auto& [name, b] : want.buffers)
          if (b.is_floating_point()) stats = std::max(stats, (got[0].buffers.at(name) - b).abs().max().item<double>());
        CAPTURE(logits);
        CAPTURE(grads);
        CAPTURE(stats);
        if (sync) {
          CHECK(logits < tolerance);
          CHECK(grads < tolerance);
          CHECK(stats < tolerance);
          CHECK(cost[0].allreduces > 0);
          CHECK(cost[0].allreduces == cost[1].allreduces);
        } else {
          CHECK(stats > 1e-3);  // each rank's own statistics
        }
      }
    }
  }

  TEST_CASE("a 2-rank run with batch norm trains as 1 process x 2B, and records the cost; 1 process: a warning") {
    TempDir dir;
    const std::string spec = std::string(test::kSmallRunSpec) +
                             "output: {save_weights: true, tensorboard: false}\ndistributed: {timeout_s: 60}\n"
                             "methods: [{type: sync_batchnorm}]\n";
    test::writeText(dir.file("s.yaml"), spec);
    const std::string exe = EXPRUN_BINARY;
    const std::string common = " --set model.batch_norm=true --set train.max_steps=4 --set model.fused=true";
    REQUIRE(std::system((exe + " run " + dir.file("s.yaml") + " --out " + dir.file("one") + common +
                         " --set train.batch_size=64 >" + dir.file("one.err") + " 2>&1").c_str()) == 0);
    CHECK(test::readText(dir.file("one.err")).find("sync_batchnorm: a run on one process") != std::string::npos);
    REQUIRE(test::runQuiet(exe + " launch --nproc-per-node 2 " + dir.file("s.yaml") + " --out " + dir.file("two") + common +
                           " --set train.batch_size=32") == 0);
    torch::serialize::InputArchive a, b;
    a.load_from(dir.file("one/p.weights.pt"));
    b.load_from(dir.file("two/p.weights.pt"));
    double worst = 0;
    for (const auto& key : a.keys()) {
      torch::Tensor ta, tb;
      a.read(key, ta, true);
      b.read(key, tb, true);
      if (!ta.is_floating_point()) continue;
      worst = std::max(worst, (ta - tb).abs().max().item<double>() / std::max(1e-3, ta.abs().max().item<double>()));
    }
    CAPTURE(worst);
    CHECK(worst < 1e-4);
    const auto result = nlohmann::json::parse(test::readText(dir.file("two/p.json")));
    const auto& f = result["methods"]["sync_batchnorm"];
    CHECK(f["layers"] == 2);
    CHECK(f["allreduces"].get<int>() == 4 * 2 * 2);  // 4 steps x 2 batch norms x (forward, backward)
    CHECK(f["epochs"][0]["seconds"].get<double>() > 0);
  }
}
