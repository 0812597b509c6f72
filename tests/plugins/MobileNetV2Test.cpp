// Purpose: model `mobilenet_v2` against torchvision 0.26 (from the venv): 3,504,872 parameters at
// 1000 classes; state-dict keys and shapes equal torchvision's at two widths; a checkpoint's
// `exprun export` loads into torchvision's mobilenet_v2 with strict=True and gives exprun's
// outputs; its stages recompute to the same gradients and the memory planner plans with them.
#include <filesystem>

#include "runner/checkpoint/Export.h"
#include "runner/cli/Commands.h"
#include "runner/plan/Planner.h"
#include "runner/train/Trainer.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;

namespace {

const char* kTorchvisionShapes = R"PY(
import json, sys, torchvision
m = torchvision.models.mobilenet_v2(num_classes=int(sys.argv[1]), width_mult=float(sys.argv[2]))
print(json.dumps({k: list(v.shape) for k, v in m.state_dict().items()}))
)PY";

std::shared_ptr<Model> mobileNet(const std::vector<std::string>& sets, DataInfo info) {
  Spec s = loadSpecFromString("name: t\nmodel: {type: mobilenet_v2}\ndata: {type: synthetic}\n", "s.yaml", sets);
  return build<ModelKind>(s.model, info);
}

}  // namespace

TEST_SUITE("mobilenet_v2") {
  TEST_CASE("registered; torchvision's parameter count, state-dict keys and shapes") {
    REQUIRE(Catalog::instance().find("model", "mobilenet_v2") != nullptr);
    auto m = mobileNet({}, DataInfo{3, 224, 224, 1000});
    CHECK(countParameters(*m) == 3504872);
    for (const char* width : {"1.0", "0.75"}) {
      CAPTURE(width);
      auto model = mobileNet({std::string("model.width_mult=") + width}, DataInfo{3, 224, 224, 1000});
      std::map<std::string, std::vector<std::int64_t>> ours;
      for (const auto& p : model->named_parameters()) ours[p.key()] = p.value().sizes().vec();
      for (const auto& b : model->named_buffers()) ours[b.key()] = b.value().sizes().vec();
      const auto theirs = nlohmann::json::parse(test::runPython(kTorchvisionShapes, {"1000", width}));
      std::map<std::string, std::vector<std::int64_t>> tv;
      for (auto it = theirs.begin(); it != theirs.end(); ++it)
        tv[it.key()] = it.value().get<std::vector<std::int64_t>>();
      CHECK(ours.size() == tv.size());
      for (const auto& [key, shape] : tv) {
        CAPTURE(key);
        REQUIRE(ours.count(key) == 1);
        CHECK(ours[key] == shape);
      }
    }
  }

  TEST_CASE("exprun export loads into torchvision's mobilenet_v2 (strict) and gives exprun's outputs") {
    TempDir tmp;
    Spec spec = loadSpecFromString(
        "name: mnv2\nseed: 4\nmodel: {type: mobilenet_v2}\n"
        "data: {type: synthetic, channels: 3, height: 32, width: 32, num_classes: 10, train_size: 16, test_size: 8}\n"
        "train: {epochs: 1, batch_size: 8, threads: 2, workers: 0, log_every: 0, eval: false}\n"
        "output: {checkpoint: {every_steps: 2}}\n",
        "mnv2.yaml");
    TrainOutcome out = Trainer(spec).run(tmp.file("mnv2.json"));
    REQUIRE(cmdExport(tmp.file("mnv2.ckpt"), "safetensors", tmp.file("w.safetensors"), false) == kExitOk);
    torch::manual_seed(7);
    torch::Tensor x = torch::randn({2, 3, 32, 32});
    out.model->eval();
    torch::Tensor y;
    {
      torch::NoGradGuard g;
      y = out.model->forward(x);
    }
    writeSafetensors(tmp.file("io.safetensors"), {{"x", x}, {"y", y}}, {});
    const std::string check = readText(std::string(EXPRUN_SOURCE_DIR) + "/tests/train/check_export.py");
    const std::string said =
        test::runPython(check, {tmp.file("w.safetensors"), tmp.file("io.safetensors"), "mobilenet_v2", "10"});
    CHECK(said.find("max |torchvision - exprun|") != std::string::npos);
  }

  TEST_CASE("stages: recomputed in backward to the same gradients; the planner plans with them") {
    auto grads = [](const std::string& recompute) {
      torch::manual_seed(3);
      auto m = mobileNet({"model.dropout=0.0"}, DataInfo{3, 32, 32, 10});
      m->train();
      if (!recompute.empty()) m->setRecomputed(m->stages());
      torch::Generator g = torch::make_generator<torch::CPUGeneratorImpl>(9);
      torch::nn::functional::cross_entropy(m->forward(torch::randn({4, 3, 32, 32}, g)), torch::tensor({1, 2, 3, 4}))
          .backward();
      std::vector<torch::Tensor> out;
      for (auto& p : m->parameters()) out.push_back(p.grad().clone());
      return out;
    };
    const auto plain = grads(""), recomputed = grads("all");
    double worst = 0;
    for (std::size_t i = 0; i < plain.size(); ++i)
      worst = std::max(worst, (plain[i] - recomputed[i]).abs().max().item<double>() /
                                  std::max(1e-6, plain[i].abs().max().item<double>()));
    CHECK(worst <= 1e-5);
    Spec spec = loadSpecFromString(
        "name: plan\nmodel: {type: mobilenet_v2}\n"
        // 64x64: batch-norm needs more than one value per channel, and the planner starts at batch 1.
        "data: {type: synthetic, channels: 3, height: 64, width: 64, num_classes: 10}\n"
        "train: {threads: 2, activation_checkpointing: [stride2, stride4]}\n",
        "plan.yaml");
    Dist single;
    MemoryPlan plan = planMemory(spec, parseBytes("64GiB"), 8, single, torch::Device(torch::kCPU));
    CHECK(plan.microBatch == 8);
    CHECK(plan.recomputed == std::vector<std::string>{"stride2", "stride4"});
    CHECK_THROWS_CONTAINING(
        std::invalid_argument,
        planMemory(loadSpecFromString(spec.toYaml(), "p.yaml", {"train.activation_checkpointing=[layer1]"}),
                   parseBytes("64GiB"), 8, single, torch::Device(torch::kCPU)),
        "has no stage 'layer1'", "stride2, stride4, stride8, stride16, stride32");
  }
}
