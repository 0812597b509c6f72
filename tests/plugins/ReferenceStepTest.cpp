// Purpose: exprun's training step against torchvision's reference script's, from the same weights
// on the same batch: resnet18 (the model plugin) forward and backward, the loss on mixed soft
// targets with label smoothing (classificationLoss, CrossEntropyLoss(label_smoothing)), and the
// sgd plugin (momentum buffer started from the first gradient, weight decay on every parameter)
// against torch.optim.SGD, over five steps: losses and parameters agree.
#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/api/Optimizer.h"
#include "runner/checkpoint/Export.h"
#include "runner/spec/Spec.h"
#include "runner/step/Step.h"
#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("reference_step") {
  TEST_CASE("five SGD steps of resnet18 on soft targets with label smoothing equal torchvision's and torch.optim's") {
    test::TempDir dir;
    const Spec spec = loadSpecFromString(
        "name: r\nseed: 4\nmodel: {type: resnet18}\n"
        "data: {type: synthetic, channels: 3, height: 32, width: 32, num_classes: 10}\n"
        "optimizer: {type: sgd, lr: 0.1, base_batch: 16, momentum: 0.9, weight_decay: 1.0e-4}\n",
        "r.yaml");
    torch::manual_seed(4);
    auto model = registry<ModelKind>().get("resnet18")(spec.model, DataInfo{3, 32, 32, 10});
    model->train();
    std::vector<std::pair<std::string, torch::Tensor>> tensors;
    for (const auto& p : model->named_parameters()) tensors.emplace_back("w." + p.key(), p.value().detach().clone());
    for (const auto& b : model->named_buffers()) tensors.emplace_back("w." + b.key(), b.value().detach().clone());
    // A batch mixed as CutMix/Mixup leave it: soft targets, each row two classes.
    torch::manual_seed(9);
    const torch::Tensor x = torch::randn({16, 3, 32, 32});
    const torch::Tensor y = torch::randint(10, {16}, torch::kInt64);
    const torch::Tensor onehot = torch::one_hot(y, 10).to(torch::kFloat);
    const torch::Tensor soft = onehot * 0.7 + onehot.roll(1, 0) * 0.3;
    tensors.emplace_back("x", x);
    tensors.emplace_back("soft", soft);
    writeSafetensors(dir.file("start.safetensors"), tensors, {});

    auto optimizer = registry<OptimizerKind>().get("sgd")(spec.optimizer, trainableParameters(*model), 0.1);
    std::vector<double> losses;
    for (int step = 0; step < 5; ++step) {
      optimizer->torchOptimizer().zero_grad();
      torch::Tensor loss = classificationLoss(model->forward(x), soft, 0.1);
      loss.backward();
      optimizer->torchOptimizer().step();
      losses.push_back(loss.item<double>());
    }
    std::vector<std::pair<std::string, torch::Tensor>> after;
    for (const auto& p : model->named_parameters()) after.emplace_back(p.key(), p.value().detach().clone());
    for (const auto& b : model->named_buffers()) after.emplace_back(b.key(), b.value().detach().clone());
    writeSafetensors(dir.file("after.safetensors"), after, {});

    const std::string out = test::runPython(R"(
import sys, torch, torchvision
from safetensors.torch import load_file
start, after = load_file(sys.argv[1]), load_file(sys.argv[2])
model = torchvision.models.get_model("resnet18", weights=None, num_classes=10)
model.load_state_dict({k[2:]: v for k, v in start.items() if k.startswith("w.")}, strict=True)
model.train()
criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
for _ in range(5):
    opt.zero_grad()
    loss = criterion(model(start["x"]), start["soft"])
    loss.backward()
    opt.step()
    print(repr(loss.item()))
mine = dict(model.state_dict())
worst = max(((mine[k].double() - v.double()).norm() / v.double().norm().clamp_min(1e-12)).item()
            for k, v in after.items() if v.is_floating_point())
print(repr(worst))
)",
                                            {dir.file("start.safetensors"), dir.file("after.safetensors")});
    std::istringstream lines(out);
    for (int step = 0; step < 5; ++step) {
      double theirs = 0;
      REQUIRE(static_cast<bool>(lines >> theirs));
      CAPTURE(step);
      CHECK(losses[static_cast<std::size_t>(step)] == doctest::Approx(theirs).epsilon(1e-5));
    }
    double worst = 1;
    REQUIRE(static_cast<bool>(lines >> worst));
    CHECK(worst < 1e-4);  // relative L2 of every parameter and buffer after five steps
  }
}
