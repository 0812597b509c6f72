// Purpose: the memory and stability options — autocast guard, fp16 loss scaler, EMA, gradient
// accumulation (equal to the large batch), clipping, label smoothing, channels_last, bf16 runs.
#include <ATen/autocast_mode.h>
#if defined(EXPRUN_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "runner/nn/Autocast.h"
#include "runner/spec/Spec.h"
#include "runner/step/GradScaler.h"
#include "runner/step/Step.h"
#include "runner/api/Optimizer.h"
#include "runner/train/Epoch.h"
#include "runner/train/Evaluate.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

using namespace exprun;

using exprun::test::kSmallRunSpec;
using exprun::test::maxParameterDiff;
using exprun::test::trainSmallRun;

namespace {
// The same model, gradients and fp16 scaler twice, six steps of which the 1st and 4th overflow: the
// optimizer `type`'s fused kernel told found_inf (no host read; ATen's CPU kernel here) against its
// per_param step, taken only when the host saw finite gradients. Parameters within `tolerance`
// (relative), the same norms, scales and skip counts; a saved state counts the steps taken.
void checkDeviceSkips(const std::string& type, const std::string& options, double tolerance) {
  auto build = [&](const std::string& impl) {
    const Spec s = loadSpecFromString(
        "name: t\nmodel: {type: small_cnn, width: 4, hidden: 8}\ndata: {type: fashion_mnist}\n"
        "optimizer: {type: " + type + ", " + options + ", impl: " + impl + "}\n",
        "s.yaml");
    torch::manual_seed(4);
    std::shared_ptr<Model> m = registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
    return std::make_pair(m, registry<OptimizerKind>().get(type)(s.optimizer, trainableParameters(*m), 0.1));
  };
  auto [deviceModel, deviceOpt] = build("fused");
  auto [hostModel, hostOpt] = build("per_param");
  auto* skipper = dynamic_cast<SkipsOnDevice*>(&deviceOpt->torchOptimizer());
  REQUIRE(skipper != nullptr);
  GradScaler deviceScaler(true, torch::Device(torch::kCPU)), hostScaler(true, torch::Device(torch::kCPU));
  const auto pd = deviceModel->parameters(), ph = hostModel->parameters();
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    torch::manual_seed(50 + step);
    for (std::size_t i = 0; i < pd.size(); ++i) {
      torch::Tensor g = torch::randn_like(pd[i]) * deviceScaler.scaleValue();
      if ((step == 0 || step == 3) && i == 1) g.view(-1)[0] = std::numeric_limits<float>::infinity();
      pd[i].mutable_grad() = g.clone();
      ph[i].mutable_grad() = g.clone();
    }
    if (step > 0) CHECK(skipper->canSkipOnDevice());  // SGD: the buffers are made (zeros after a skipped first step)
    const StepOutcome d = optimizerStep(deviceOpt->torchOptimizer(), deviceScaler, pd, 0.0, 0.0);
    const StepOutcome h = optimizerStep(hostOpt->torchOptimizer(), hostScaler, ph, 0.0, 0.0);
    CHECK(d.stepped);  // the host does not know
    CHECK(h.stepped == (step != 0 && step != 3));
    CHECK(d.gradNorm.item<double>() == doctest::Approx(h.stepped ? h.gradNorm.item<double>() : 0.0).epsilon(1e-6));
    double worst = 0;
    for (std::size_t i = 0; i < pd.size(); ++i)
      worst = std::max(worst, ((pd[i] - ph[i]).abs().max() / ph[i].abs().max().clamp_min(1e-12)).item<double>());
    CHECK(worst <= tolerance);
    CHECK(deviceScaler.scaleValue() == hostScaler.scaleValue());
  }
  CHECK(deviceScaler.skippedSteps() == 2);
  CHECK(hostScaler.skippedSteps() == 2);
  deviceScaler.setSkippedSteps(5);  // a checkpoint's count restored
  CHECK(deviceScaler.skippedSteps() == 5);
  if (type == "adamw") {  // the host's counts ran ahead of the kernel's; saving reads them back
    torch::serialize::OutputArchive archive;
    deviceOpt->torchOptimizer().save(archive);
    for (std::size_t i = 0; i < pd.size(); ++i) {
      const auto& sd = static_cast<torch::optim::AdamWParamState&>(*deviceOpt->torchOptimizer().state().at(pd[i].unsafeGetTensorImpl()));
      const auto& sh = static_cast<torch::optim::AdamWParamState&>(*hostOpt->torchOptimizer().state().at(ph[i].unsafeGetTensorImpl()));
      CHECK(sd.step() == 4);
      CHECK(sh.step() == 4);
    }
  }
}
}  // namespace

TEST_SUITE("precision") {
  TEST_CASE("autocast guard: enables, nests, restores") {
    CHECK_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
    auto a = torch::randn({4, 4}), b = torch::randn({4, 4});
    {
      AutocastGuard outer(c10::DeviceType::CPU, at::kBFloat16);
      CHECK(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
      CHECK((torch::mm(a, b).scalar_type() == at::kBFloat16));
      {
        AutocastGuard fp32(c10::DeviceType::CPU, std::nullopt);  // fp32: no change
        CHECK((torch::mm(a, b).scalar_type() == at::kBFloat16));
      }
      CHECK(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
    }
    CHECK_FALSE(at::autocast::is_autocast_enabled(c10::DeviceType::CPU));
    CHECK((torch::mm(a, b).scalar_type() == at::kFloat));
    CHECK((autocastDtype(Precision::Bf16) == at::kBFloat16));
    CHECK_FALSE(autocastDtype(Precision::Fp32).has_value());
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kSmallRunSpec, "p.yaml", {"train.precision=fp8"}), "train.precision",
                            "valid: fp32, bf16, fp16");
  }

  TEST_CASE("loss scaler: unscale, skip on inf, back off, grow") {
    GradScaler s(true, torch::Device(torch::kCPU), 65536.0, 2.0, 0.5, 2);
    auto p = torch::zeros({2}).set_requires_grad(true);
    p.mutable_grad() = torch::tensor({65536.0f, 131072.0f});
    CHECK(s.scale(torch::tensor(1.0f)).item<float>() == 65536.0f);
    CHECK(s.unscale({p}));
    CHECK(p.grad()[1].item<float>() == doctest::Approx(2.0));
    s.update();
    CHECK(s.scaleValue() == 65536.0);
    p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity()});
    CHECK_FALSE(s.unscale({p}));
    CHECK(s.skippedSteps() == 1);
    s.update();
    CHECK(s.scaleValue() == 32768.0);  // backed off
    for (int i = 0; i < 2; ++i) {
      p.mutable_grad() = torch::ones({2});
      CHECK(s.unscale({p}));
      s.update();
    }
    CHECK(s.scaleValue() == 65536.0);  // grown after `interval` finite steps
    GradScaler off(false, torch::Device(torch::kCPU));
    CHECK(off.scaleValue() == 1.0);
  }

  TEST_CASE("an inf gradient skips the step, leaves the parameters and halves the scale") {
    auto p = torch::ones({3}).set_requires_grad(true);
    torch::optim::SGD opt({p}, torch::optim::SGDOptions(0.1));
    GradScaler scaler(true, torch::Device(torch::kCPU));
    p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 1.0f});
    StepOutcome r = optimizerStep(opt, scaler, {p}, 1.0, 0.0);
    CHECK_FALSE(r.gradNorm.defined());
    CHECK_FALSE(r.stepped);
    CHECK(torch::equal(p, torch::ones({3})));
    CHECK(scaler.scaleValue() == 32768.0);
    p.mutable_grad() = torch::full({3}, 32768.0f * 4);  // scaled gradient of 4 per element
    r = optimizerStep(opt, scaler, {p}, 1.0, 0.0);       // norm sqrt(48) clipped to 1
    CHECK(r.stepped);
    CHECK(r.gradNorm.item<double>() == doctest::Approx(std::sqrt(48.0)));
    CHECK(p[0].item<double>() == doctest::Approx(1.0 - 0.1 / std::sqrt(3.0)).epsilon(1e-5));
  }

  TEST_CASE("fp16 steps that fused SGD skips on the device end as the host's check ends them") {
    checkDeviceSkips("sgd", "lr: 0.1, momentum: 0.9, weight_decay: 0.01", 1e-6);
  }

  TEST_CASE("fp16 steps that fused AdamW skips on the device end as the host's check ends them; saved counts agree") {
    checkDeviceSkips("adamw", "lr: 0.01, weight_decay: 0.05", 1e-5);
  }

#if defined(EXPRUN_WITH_CUDA)
  TEST_CASE("on a GPU the training steps between log points never wait for the device (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    // c10's sync debug mode warns at every implicit synchronisation (a host read of a device
    // tensor, a synchronous copy, a stream or device sync) of this thread: count them for runs of 6
    // and of 12 steps without log lines, evaluations or files, both ending inside the one epoch of
    // 16 steps (2,048 images: what the GPU machine's Fashion-MNIST copy holds; at the spec's 1,024
    // both runs would stop at the epoch's 8th step and the comparison would prove nothing). The
    // set-up and the run's end wait as many times in both; the steps add none.
    struct Counter : c10::WarningHandler {
      int syncs = 0;
      std::string first;
      void process(const c10::Warning& w) override {
        if (w.msg().find("synchroniz") == std::string::npos) return;
        if (syncs++ == 0) first = w.msg();
      }
    };
    for (const auto& [precision, optimizer] : {std::pair<const char*, const char*>{"bf16", "sgd"}, {"fp16", "sgd"},
                                                {"fp16", "adamw"}}) {
      CAPTURE(precision);
      CAPTURE(optimizer);
      auto syncsIn = [&](int steps) {
        Counter counter;
        c10::WarningUtils::WarningHandlerGuard guard(&counter);
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
        std::vector<std::string> sets{"train.device=cuda", std::string("train.precision=") + precision,
                                      "data.train_limit=2048", "train.max_steps=" + std::to_string(steps), "optimizer.impl=fused"};
        if (std::string(optimizer) == "adamw") sets.push_back("optimizer={type: adamw, lr: 0.001, base_batch: 64, impl: fused}");
        test::trainSmallRun(sets);
        c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
        MESSAGE(steps << " steps: " << counter.syncs << " synchronisations, the first: " << counter.first);
        return counter.syncs;
      };
      const int few = syncsIn(6), more = syncsIn(12);
      CHECK(more == few);
    }
  }
#endif

  TEST_CASE("EMA after n steps: decay^n x start + (1 - decay^n) x value") {
    torch::nn::Linear lin(1, 1);
    {
      torch::NoGradGuard g;
      lin->weight.fill_(2.0);
    }
    Ema ema(*lin, 0.9);
    {
      torch::NoGradGuard g;
      lin->weight.fill_(-1.0);
    }
    for (int i = 0; i < 7; ++i) ema.update(*lin);
    ema.swap(*lin);
    const double d7 = std::pow(0.9, 7);
    CHECK(lin->weight.item<double>() == doctest::Approx(d7 * 2.0 + (1 - d7) * -1.0));
  }

  TEST_CASE("EMA: average, swap, restore") {
    torch::nn::Linear lin(1, 1);
    {
      torch::NoGradGuard g;
      lin->weight.fill_(0.0);
    }
    Ema ema(*lin, 0.5);
    {
      torch::NoGradGuard g;
      lin->weight.fill_(1.0);
    }
    ema.update(*lin);
    ema.swap(*lin);
    CHECK(lin->weight.item<double>() == doctest::Approx(0.5));
    ema.swap(*lin);
    CHECK(lin->weight.item<double>() == doctest::Approx(1.0));
  }

  TEST_CASE("accumulate 2 x batch 32 ends where batch 64 does") {
    auto big = trainSmallRun({"train.batch_size=64"});
    auto acc = trainSmallRun({"train.batch_size=32", "train.accumulate=2"});
    CHECK(acc.result["provenance"]["global_batch"] == 64);
    CHECK(acc.result["epochs"][0]["steps"] == 6);
    CHECK(acc.result["epochs"][0]["samples"] == 6 * 64);
    CHECK(maxParameterDiff(*big.model, *acc.model) <= 1e-5);
    auto one = trainSmallRun({"train.batch_size=32"});
    CHECK(maxParameterDiff(*big.model, *one.model) > 1e-3);  // a different run is visibly different
  }

  TEST_CASE("clip_grad_norm bounds every update; grad norm is recorded") {
    Spec spec = loadSpecFromString(kSmallRunSpec, "p.yaml", {"optimizer.momentum=0", "train.max_steps=3", "train.batch_size=64",
                                                      "train.clip_grad_norm=0.001"});
    torch::manual_seed(5);
    auto init = registry<ModelKind>().get("small_cnn")(spec.model, DataInfo{1, 28, 28, 10});
    auto out = Trainer(spec).run("");
    // SGD without momentum: each step moves the weights by lr x (clipped gradient), norm <= 0.001.
    double total = 0;
    auto a = init->parameters(), b = out.model->parameters();
    for (size_t i = 0; i < a.size(); ++i) total += (a[i] - b[i]).pow(2).sum().item<double>();
    CHECK(std::sqrt(total) <= 3 * 0.1 * 0.001 * 1.0001);
    CHECK(std::sqrt(total) > 0.0);
    CHECK(out.result["epochs"][0]["grad_norm"].get<double>() > 0.001);  // recorded before clipping
  }

  TEST_CASE("label smoothing: (1 - s) x cross-entropy + s x mean over classes of -log p") {
    auto logits = torch::tensor({{2.0f, 0.5f, -1.0f}, {0.1f, 0.2f, 3.0f}});
    auto y = torch::tensor({0, 1}, torch::kInt64);
    auto logp = torch::log_softmax(logits, 1);
    const double ce = -(logp[0][0].item<double>() + logp[1][1].item<double>()) / 2;
    const double uniform = -logp.mean().item<double>();
    CHECK(classificationLoss(logits, y, 0.0).item<double>() == doctest::Approx(ce));
    CHECK(classificationLoss(logits, y, 0.2).item<double>() == doctest::Approx(0.8 * ce + 0.2 * uniform));
    CHECK((classificationLoss(logits.to(torch::kBFloat16), y, 0.0).scalar_type() == torch::kFloat32));
    auto smooth = trainSmallRun({"train.label_smoothing=0.2"});
    CHECK(smooth.result["spec"]["train"]["label_smoothing"].get<double>() == doctest::Approx(0.2));
  }

  TEST_CASE("channels_last trains like the default memory format") {
    auto plain = trainSmallRun({});
    auto cl = trainSmallRun({"train.channels_last=true"});
    CHECK(cl.result["provenance"]["channels_last"] == true);
    CHECK(maxParameterDiff(*plain.model, *cl.model) <= 1e-4);
  }

  TEST_CASE("bf16 autocast trains, close to fp32; EMA Top-1 reported") {
    auto fp32 = trainSmallRun({"train.eval=true", "train.max_steps=12"});
    auto bf16 = trainSmallRun({"train.eval=true", "train.max_steps=12", "train.precision=bf16", "train.ema_decay=0.9"});
    const auto& e = bf16.result["epochs"][0];
    CHECK(bf16.result["provenance"]["precision"] == "bf16");
    CHECK(e["val_top1"].get<double>() > 30.0);
    CHECK(std::abs(e["train_loss"].get<double>() - fp32.result["epochs"][0]["train_loss"].get<double>()) < 0.1);
    CHECK(e.contains("val_top1_ema"));
    CHECK(e["val_top1_ema"].get<double>() > 10.0);
    CHECK_FALSE(fp32.result["epochs"][0].contains("val_top1_ema"));
    for (auto& p : bf16.model->parameters()) CHECK((p.scalar_type() == torch::kFloat32));  // fp32 master weights
  }

  TEST_CASE("bf16, fp16: the EMA's Top-1 is the EMA weights' (evaluated in autocast regions of their own)") {
    // An EMA that barely moves stays near the initial weights, far from the trained ones. Within
    // one autocast region, fp16 casts of the raw weights were reused for the EMA's evaluation.
    for (const char* precision : {"bf16", "fp16"}) {
      CAPTURE(precision);
      Spec spec = loadSpecFromString(kSmallRunSpec, "p.yaml",
                                     {std::string("train.precision=") + precision, "train.ema_decay=0.999999", "train.eval=true"});
      Dist single;
      std::optional<TrainSetup> set;
      try {
        set.emplace(setUp(spec, single));
      } catch (const std::invalid_argument& e) {  // this LibTorch's CPU autocast lacks the precision
        MESSAGE(e.what());
        continue;
      }
      TrainSetup& s = *set;
      TrainStep step(s.learner, s.spec().train.numerics, s.spec().train.rules, single, s.settings.device);
      Progress at;
      EpochRun run(s, at);
      for (; at.position.step < 6; ++at.position.step) {
        step.run(run.batches(), 1, at.position.step, 1, run.sums(), run.meters(), at.position);
        ++at.position.micro;
      }
      const EpochRecord rec = endEpoch(s, run, at.position, 0.1, single);
      s.learner.ema->swap(*s.learner.model);
      const double emaTop1 = evaluate(s, single).top1;
      s.learner.ema->swap(*s.learner.model);
      REQUIRE(rec.valTop1Ema.has_value());
      CHECK(*rec.valTop1Ema == emaTop1);
      CHECK(rec.valTop1 == evaluate(s, single).top1);
      CHECK(std::abs(rec.valTop1 - emaTop1) > 5.0);  // the two weight sets are told apart
    }
  }

  TEST_CASE("the fp32 abort check kept on the device (as on a GPU) names the same step and tensor, later") {
    // lr 1e30 makes the gradients overflow within a few steps.
    Spec spec = loadSpecFromString(kSmallRunSpec, "p.yaml", {"optimizer.lr=1e30", "train.batch_size=64"});
    auto firstBad = [&](bool defer, std::int64_t& thrownAt) {
      Dist single;
      TrainSetup s = setUp(spec, single);
      TrainStep step(s.learner, s.spec().train.numerics, s.spec().train.rules, single, s.settings.device);
      step.deferChecks(defer);
      Progress at;
      EpochRun run(s, at);
      try {
        for (; at.position.step < 12; ++at.position.step) {
          step.run(run.batches(), 1, at.position.step, 1, run.sums(), run.meters(), at.position);
          ++at.position.micro;
        }
        step.verify(at.position.step);
      } catch (const NonFiniteError& e) {
        thrownAt = at.position.step;
        return std::string(e.what());
      }
      return std::string();
    };
    std::int64_t eagerAt = -1, deferredAt = -1;
    const std::string eager = firstBad(false, eagerAt), deferred = firstBad(true, deferredAt);
    MESSAGE(eager << "\n" << deferred);
    REQUIRE(eagerAt >= 0);
    REQUIRE(deferredAt == 12);  // reported by verify() after the last step, not by the step itself
    const std::string head = eager.substr(0, eager.find("; nothing was applied"));
    CHECK(head.find("first non-finite tensor: gradient of '") != std::string::npos);
    CHECK(deferred.rfind(head, 0) == 0);  // the same step, epoch, loss and tensor
    CHECK(deferred.find("found at step 12") != std::string::npos);
  }

  TEST_CASE("fp16: trains with a loss scale, or is refused with a clear error") {
    Spec spec = loadSpecFromString(kSmallRunSpec, "p.yaml", {"train.precision=fp16"});
    try {
      auto out = Trainer(spec).run("");
      CHECK(out.result["epochs"][0]["loss_scale"].get<double>() >= 1.0);
      CHECK(std::isfinite(out.result["epochs"][0]["train_loss"].get<double>()));
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("train.precision: fp16 autocast is not supported") != std::string::npos);
    }
  }
}
