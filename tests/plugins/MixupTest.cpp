// Purpose: the `mixup` method: Mixup blends each image with its mirror in the batch (or, partner:
// roll, the previous one, as torchvision's MixUp) and the targets with the same λ; CutMix pastes a
// box of the partner whose area is 1 − λ; the choice between them
// and λ come from (seed, step, micro-batch) only (every rank, and a resumed run, draw alike); the
// loss trains on the soft targets (label smoothing on top, as timm's mixup_target gives them); a
// run with DDP-like accumulation, bf16, EMA and channels_last trains, and resumes mid-epoch bit for
// bit; bad options exit 2 naming the key.
#include "runner/checkpoint/Checkpoint.h"
#include "runner/step/Step.h"
#include "runner/train/Trainer.h"

#include "tests/MethodUtil.h"
#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

using namespace exprun;
using exprun::test::SpecOnlyContext;

namespace {

Spec mixSpec(const std::string& options, std::vector<std::string> sets = {}) {
  sets.insert(sets.begin(), "methods=[{type: mixup, " + options + "}]");
  return loadSpecFromString(test::kSmallRunSpec, "p.yaml", sets);
}

StepBatch batch(std::int64_t step, std::int64_t micro = 0) {
  torch::manual_seed(1);
  StepBatch b;
  b.x = torch::randn({6, 1, 8, 8});
  b.y = torch::tensor({0, 1, 2, 3, 4, 5}, torch::kInt64);
  b.step = step;
  b.micro = micro;
  return b;
}

// λ of a mixed batch: the weight of image 0's own label in its soft target.
double lambdaOf(const StepBatch& b) { return b.soft[0][b.y[0].item<std::int64_t>()].item<double>(); }

}  // namespace

TEST_SUITE("mixup") {
  TEST_CASE("mixup blends each image and its target with the mirrored one by the same lambda") {
    SpecOnlyContext ctx(mixSpec("mixup_alpha: 0.2"), DataInfo{1, 8, 8, 10});
    auto m = test::methodOf(ctx);
    StepBatch b = batch(3);
    const torch::Tensor x = b.x.clone();
    m->onBatch(b);
    REQUIRE(b.soft.defined());
    CHECK(b.soft.sizes() == torch::IntArrayRef{6, 10});
    const double lam = lambdaOf(b);
    CHECK(lam > 0);
    CHECK(lam < 1);
    CHECK(torch::allclose(b.x, x * lam + x.flip(0) * (1 - lam), 0, 1e-6));
    CHECK(b.soft[0][5].item<double>() == doctest::Approx(1 - lam));  // image 0's mirror is image 5
    CHECK(torch::allclose(b.soft.sum(1), torch::ones({6}), 0, 1e-6));
    CHECK(torch::equal(b.labels(), lam >= 0.5 ? b.y : b.y.flip(0)));
  }

  TEST_CASE("cutmix pastes a box of the mirror whose area is 1 - lambda") {
    SpecOnlyContext ctx(mixSpec("mixup_alpha: 0.0, cutmix_alpha: 1.0"), DataInfo{1, 8, 8, 10});
    auto m = test::methodOf(ctx);
    int boxes = 0;
    for (std::int64_t step = 0; step < 20; ++step) {
      StepBatch b = batch(step);
      const torch::Tensor x = b.x.clone();
      m->onBatch(b);
      const double lam = lambdaOf(b);
      const torch::Tensor fromMirror = (b.x == x.flip(0)).all(1).all(0);  // [8, 8]: pixels taken from the mirror
      const torch::Tensor kept = (b.x == x).all(1).all(0);
      CHECK(torch::logical_or(fromMirror, kept).all().item<bool>());  // every pixel is one or the other
      const double pasted = fromMirror.sum().item<double>() / 64.0;
      CHECK(pasted == doctest::Approx(1 - lam));  // lambda corrected to the box
      boxes += pasted > 0;
      CHECK(b.soft[1][4].item<double>() == doctest::Approx(1 - lam));
    }
    CHECK(boxes > 10);
  }

  TEST_CASE("partner: roll mixes each image with the previous one, as torchvision's MixUp and CutMix do") {
    SpecOnlyContext ctx(mixSpec("mixup_alpha: 0.2, partner: roll"), DataInfo{1, 8, 8, 10});
    auto m = test::methodOf(ctx);
    StepBatch b = batch(3);
    const torch::Tensor x = b.x.clone();
    m->onBatch(b);
    const double lam = lambdaOf(b);
    REQUIRE(lam > 0);
    REQUIRE(lam < 1);
    CHECK(b.soft[0][5].item<double>() == doctest::Approx(1 - lam));  // image 0's partner is image 5 (cyclic)
    CHECK(b.soft[3][2].item<double>() == doctest::Approx(1 - lam));  // image 3's is image 2
    // torchvision.transforms.v2.MixUp on the same batch with the same lambda gives the same images and targets.
    test::TempDir dir;
    std::string values;
    for (float v : std::vector<float>(x.data_ptr<float>(), x.data_ptr<float>() + x.numel())) values += std::to_string(v) + " ";
    test::writeText(dir.file("x.txt"), values);
    const std::string out = test::runPython(R"(
import sys, torch
from torchvision.transforms import v2
x = torch.tensor([float(v) for v in open(sys.argv[1]).read().split()]).view(6, 1, 8, 8)
y = torch.arange(6)
m = v2.MixUp(alpha=0.2, num_classes=10)
lam = float(sys.argv[2])
m._dist = type("Fixed", (), {"sample": lambda self, shape=(): torch.tensor(lam)})()
xm, ym = m(x, y)
print(" ".join(repr(float(v)) for v in xm.flatten()))
print(" ".join(repr(float(v)) for v in ym.flatten()))
)",
                                            {dir.file("x.txt"), std::to_string(lam)});
    std::istringstream lines(out);
    std::string xs, ys;
    std::getline(lines, xs);
    std::getline(lines, ys);
    auto parse = [](const std::string& line) {
      std::vector<float> v;
      std::istringstream in(line);
      for (double d; in >> d;) v.push_back(static_cast<float>(d));
      return torch::tensor(v);
    };
    // The inputs went through text with 6 digits: within 1e-5 of the float images.
    CHECK(torch::allclose(b.x.flatten(), parse(xs), 0, 1e-4));
    CHECK(torch::allclose(b.soft.flatten(), parse(ys), 0, 1e-5));
    // CutMix with roll: the pasted pixels are the previous image's.
    SpecOnlyContext cctx(mixSpec("mixup_alpha: 0.0, cutmix_alpha: 1.0, partner: roll"), DataInfo{1, 8, 8, 10});
    auto c = test::methodOf(cctx);
    int boxes = 0;
    for (std::int64_t step = 0; step < 20; ++step) {
      StepBatch cb = batch(step);
      const torch::Tensor before = cb.x.clone();
      c->onBatch(cb);
      const torch::Tensor fromPrevious = (cb.x == before.roll(1, 0)).all(1).all(0);
      const torch::Tensor kept = (cb.x == before).all(1).all(0);
      CHECK(torch::logical_or(fromPrevious, kept).all().item<bool>());
      const double lamC = lambdaOf(cb);
      CHECK(fromPrevious.sum().item<double>() / 64.0 == doctest::Approx(1 - lamC));
      CHECK(cb.soft[1][0].item<double>() == doctest::Approx(1 - lamC));
      boxes += lamC < 1;
    }
    CHECK(boxes > 10);
  }

  TEST_CASE("the draws depend on seed, step and micro-batch only; switch_prob and prob choose") {
    const auto lam = [](const std::string& options, std::int64_t step, std::int64_t micro, std::vector<std::string> sets = {}) {
      SpecOnlyContext ctx(mixSpec(options, sets), DataInfo{1, 8, 8, 10});
      auto m = test::methodOf(ctx);
      StepBatch b = batch(step, micro);
      m->onBatch(b);
      return b.soft.defined() ? lambdaOf(b) : 1.0;
    };
    CHECK(lam("mixup_alpha: 0.2", 7, 1) == lam("mixup_alpha: 0.2", 7, 1));  // another method object, another rank
    CHECK(lam("mixup_alpha: 0.2", 7, 1) != lam("mixup_alpha: 0.2", 8, 1));
    CHECK(lam("mixup_alpha: 0.2", 7, 1) != lam("mixup_alpha: 0.2", 7, 0));
    CHECK(lam("mixup_alpha: 0.2", 7, 1) != lam("mixup_alpha: 0.2", 7, 1, {"seed=9"}));
    CHECK(lam("mixup_alpha: 0.2, prob: 0.0", 7, 1) == 1.0);  // never mixed
    SpecOnlyContext both(mixSpec("mixup_alpha: 0.2, cutmix_alpha: 1.0, switch_prob: 0.5"), DataInfo{1, 8, 8, 10});
    auto m = test::methodOf(both);
    for (std::int64_t step = 0; step < 40; ++step) {
      StepBatch b = batch(step);
      m->onBatch(b);
    }
    const auto f = m->figures();
    CHECK(f["mixup_batches"].get<int>() + f["cutmix_batches"].get<int>() == 40);
    CHECK(f["mixup_batches"].get<int>() > 8);  // about half each
    CHECK(f["cutmix_batches"].get<int>() > 8);
  }

  TEST_CASE("the loss trains on the soft targets, smoothed as timm's mixup_target smooths them") {
    torch::manual_seed(2);
    const torch::Tensor logits = torch::randn({4, 10});
    const torch::Tensor y = torch::tensor({1, 2, 3, 4}, torch::kInt64);
    const double lam = 0.7, s = 0.1;
    const torch::Tensor one = torch::one_hot(y, 10).to(torch::kFloat);
    const torch::Tensor soft = one * lam + one.flip(0) * (1 - lam);
    // timm: off = s / C, on = 1 - s + off, y1 = one·on + (1 - one)·off, mixed = λ y1 + (1 - λ) y2.
    const double off = s / 10, on = 1 - s + off;
    const torch::Tensor timm = (one * on + (1 - one) * off) * lam + (one.flip(0) * on + (1 - one.flip(0)) * off) * (1 - lam);
    const torch::Tensor expected = (-timm * torch::log_softmax(logits, 1)).sum(1).mean();
    CHECK(classificationLoss(logits, soft, s).item<double>() == doctest::Approx(expected.item<double>()).epsilon(1e-6));
  }

  TEST_CASE("a run with accumulation, bf16, EMA and channels_last trains, and resumes mid-epoch bit for bit") {
    test::TempDir tmp;
    const std::vector<std::string> sets{"train.max_steps=6",         "train.accumulate=2",
                                        "train.precision=bf16",      "train.ema_decay=0.9",
                                        "train.channels_last=true",  "train.label_smoothing=0.1",
                                        "output.checkpoint.every_steps=3", "output.tensorboard=false",
                                        "output.save_weights=true"};
    const Spec spec = mixSpec("mixup_alpha: 0.2, cutmix_alpha: 1.0", sets);
    const TrainOutcome full = Trainer(spec).run(tmp.file("a/p.json"));
    const auto& e = full.result["epochs"][0];
    CHECK(std::isfinite(e["train_loss"].get<double>()));
    const auto& f = full.result["methods"]["mixup"];
    CHECK(f["mixup_batches"].get<int>() + f["cutmix_batches"].get<int>() == 2 * e["steps"].get<int>());  // accumulate 2
    Trainer resumed(spec);
    resumed.setResume(ResumeRequest{tmp.file("a/p.ckpt/step-000000003"), false});
    const TrainOutcome again = resumed.run(tmp.file("b/p.json"));
    CHECK(again.result["epochs"][0]["train_loss"] == e["train_loss"]);
    CHECK(again.result["methods"] == full.result["methods"]);
    CHECK(test::readText(tmp.file("a/p.weights.pt")) == test::readText(tmp.file("b/p.weights.pt")));
  }

  TEST_CASE("bad options are refused with the key path") {
    CHECK_THROWS_CONTAINING(SpecError, mixSpec("mixup_alpha: -0.1"), "methods[0].mixup_alpha", "out of range");
    CHECK_THROWS_CONTAINING(SpecError, mixSpec("mixup_alpha: 0.0"), "methods[0].mixup_alpha", "both 0");
    CHECK_THROWS_CONTAINING(SpecError, mixSpec("mixup_alpha: 0.2, switch_prob: 1.5"), "methods[0].switch_prob");
  }
}
