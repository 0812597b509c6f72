// Purpose: train.cuda_graph (runner/step/StepGraph.h) — what is refused before training and why,
// the optimizers' learning rate read from the device (on the CPU through their fused kernels'
// CPU versions), and on a GPU: a graphed run against the same run eager, its replays free of
// synchronisation.
#include <c10/util/Exception.h>

#include "runner/api/Optimizer.h"
#include "runner/spec/Spec.h"
#include "runner/step/StepGraph.h"
#include "tests/TrainUtil.h"

#if defined(EXPRUN_WITH_CUDA)
#include <c10/cuda/CUDAFunctions.h>
#endif

using namespace exprun;

namespace {
// The graph needs the fused optimizer step, an opt-in (not yet run on a GPU), asked for here.
Spec graphSpec(std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"train.cuda_graph=true", "optimizer.impl=fused"});
  return loadSpecFromString(test::kSmallRunSpec, "g.yaml", sets);
}
std::unique_ptr<Optimizer> optimizerOf(const Spec& s, Model& m) {
  return registry<OptimizerKind>().get(s.optimizer.type())(s.optimizer, trainableParameters(m), 0.125);
}
std::shared_ptr<Model> smallModel(const Spec& s) {
  torch::manual_seed(7);
  return registry<ModelKind>().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
}
// whyNoCudaGraph for the spec with `sets` as if on a CUDA device, one process, no methods unless given.
std::string why(const std::vector<std::string>& sets, bool distributed = false, std::vector<std::string> methods = {},
                bool cyclesMomentum = false) {
  const Spec s = graphSpec(sets);
  auto m = smallModel(s);
  auto opt = optimizerOf(s, *m);
  return whyNoCudaGraph(s, torch::Device(torch::kCUDA, 0), distributed, methods, *opt, cyclesMomentum);
}
// One step of `opt` on `m` (loss: mean square of the output on fixed inputs).
void stepOnce(Model& m, torch::optim::Optimizer& opt) {
  torch::manual_seed(11);
  const torch::Tensor x = torch::randn({4, 1, 28, 28});
  opt.zero_grad();
  m.forward(x).square().mean().backward();
  opt.step();
}
// The parameters after two steps of the plugin `type` (impl fused, on the CPU) at learning rate
// 0.125 from its options, or (lrTensor) from a float32 tensor holding `lr` while the options say 1.
std::vector<torch::Tensor> twoSteps(const std::string& type, bool lrTensor, double lr) {
  const Spec s = graphSpec({"optimizer={type: " + type + ", lr: 0.1, base_batch: 64, impl: fused}"});
  auto m = smallModel(s);
  auto opt = optimizerOf(s, *m);
  auto* c = dynamic_cast<CapturableStep*>(&opt->torchOptimizer());
  REQUIRE(c != nullptr);
  if (lrTensor) {
    opt->setLearningRate(1.0);  // the options' value, which the kernel must not read
    std::vector<torch::Tensor> lrs;
    for (std::size_t i = 0; i < opt->torchOptimizer().param_groups().size(); ++i)
      lrs.push_back(torch::full({}, lr, torch::kFloat32));
    c->readLrFrom(lrs);
  }
  for (int i = 0; i < 2; ++i) stepOnce(*m, opt->torchOptimizer());
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}
bool sameBits(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}
}  // namespace

TEST_SUITE("step_graph") {
  TEST_CASE("train.cuda_graph: what cannot hold is named before training") {
    CHECK(why({}) == "");  // sgd's fused step, fp32, abort: capturable
    CHECK(why({"train.precision=fp16", "optimizer={type: adamw, lr: 0.001, base_batch: 64, impl: fused}"}) == "");
    CHECK(why({}, true).find("several processes") != std::string::npos);
    CHECK(why({}, false, {"mixup", "stochastic_depth"}).find("method(s) mixup, stochastic_depth") != std::string::npos);
    CHECK(why({"train.on_nonfinite=skip"}).find("train.on_nonfinite: skip") != std::string::npos);
    CHECK(why({"train.precision=bf16", "train.on_nonfinite=skip"}).find("on_nonfinite: skip") != std::string::npos);
    CHECK(why({"train.precision=fp16", "train.on_nonfinite=skip"}) == "");  // the scaler decides on the device
    CHECK(why({"optimizer.impl=per_param"}).find("optimizer.impl: per_param") != std::string::npos);
    CHECK(why({"optimizer.impl=foreach"}).find("optimizer.impl: foreach") != std::string::npos);
    CHECK(why({"optimizer={type: adamw, lr: 0.001, base_batch: 64, impl: per_param}"}).find("per_param") !=
          std::string::npos);
    CHECK(why({}, false, {}, true).find("cycle_momentum") != std::string::npos);
    {  // the default optimizer step (per-parameter) is named
      const Spec plain = loadSpecFromString(test::kSmallRunSpec, "g.yaml", {"train.cuda_graph=true"});
      auto pm = smallModel(plain);
      auto po = optimizerOf(plain, *pm);
      CHECK(whyNoCudaGraph(plain, torch::Device(torch::kCUDA, 0), false, {}, *po, false).find("optimizer.impl: per_param") !=
            std::string::npos);
    }
    // The device itself: on the CPU, or (a build without CUDA) not at all.
    const Spec s = graphSpec({});
    auto m = smallModel(s);
    auto opt = optimizerOf(s, *m);
    const std::string cpu = whyNoCudaGraph(s, torch::Device(torch::kCPU), false, {}, *opt, false);
    CHECK((cpu.find("trains on cpu") != std::string::npos || cpu.find("without CUDA") != std::string::npos));
  }

  TEST_CASE("train.cuda_graph on the CPU stops the run before training, naming the option") {
    std::string message;
    try {
      test::trainSmallRun({"train.cuda_graph=true", "train.device=cpu"});
    } catch (const std::invalid_argument& e) {
      message = e.what();
    }
    CHECK(message.rfind("train.cuda_graph: ", 0) == 0);
  }

  TEST_CASE("sgd and adamw read the learning rate from the device tensor they are given") {
    for (const char* type : {"sgd", "adamw"}) {
      CAPTURE(type);
      const auto fromOptions = twoSteps(type, false, 0.125);
      CHECK(sameBits(fromOptions, twoSteps(type, true, 0.125)));  // 0.125: the same in float32
      CHECK_FALSE(sameBits(fromOptions, twoSteps(type, true, 0.25)));
    }
  }

  TEST_CASE("the hyperparameters a graph holds fixed: a schedule's momentum changes them, the learning rate does not") {
    for (const char* type : {"sgd", "adamw"}) {
      CAPTURE(type);
      const Spec s = graphSpec({"optimizer={type: " + std::string(type) + ", lr: 0.1, base_batch: 64}"});
      auto m = smallModel(s);
      auto opt = optimizerOf(s, *m);
      auto* c = dynamic_cast<CapturableStep*>(&opt->torchOptimizer());
      REQUIRE(c != nullptr);
      const std::vector<double> before = c->fixedHyperparameters();
      CHECK_FALSE(before.empty());
      opt->setLearningRate(0.5);
      CHECK(c->fixedHyperparameters() == before);
      opt->setMomentum(0.5);
      CHECK(c->fixedHyperparameters() != before);
    }
  }

  TEST_CASE("when a graphed step replays, captures or runs eagerly") {
    using P = StepGraphPlan;
    const std::int64_t w = StepGraph::kWarmupSteps;
    auto plan = [&](bool captured, bool sameShapes, bool sameFixed, bool warmed, bool larger, std::int64_t eager) {
      return planStepGraph(StepGraphFacts{captured, sameShapes, sameFixed, warmed, larger, eager}, w);
    };
    // The warm-up, then the capture of the shapes the last warm-up step ran; then replays.
    CHECK(plan(false, false, true, true, true, 0) == P::Eager);
    CHECK(plan(false, false, true, true, true, w - 1) == P::Eager);
    CHECK(plan(false, false, true, true, true, w) == P::Capture);
    CHECK(plan(false, false, true, false, true, w) == P::Eager);  // shapes no eager step ran: first eagerly
    CHECK(plan(true, true, true, false, false, w) == P::Replay);
    // An epoch's smaller last step runs eagerly, and the next full step replays.
    CHECK(plan(true, false, true, true, false, w + 1) == P::Eager);
    CHECK(plan(true, true, true, false, false, w + 1) == P::Replay);
    // A changed momentum: the step runs eagerly with it, then is captured again.
    CHECK(plan(true, true, false, false, false, w + 1) == P::Eager);
    CHECK(plan(true, true, false, true, false, w + 2) == P::Capture);
    // The first capture was a small last step: a larger one runs eagerly once, then is captured.
    CHECK(plan(true, false, true, false, true, w + 1) == P::Eager);
    CHECK(plan(true, false, true, true, true, w + 2) == P::Capture);
  }

  TEST_CASE("a momentum buffer or state not made yet is what the warm-up is for") {
    const Spec s = graphSpec({"optimizer.impl=fused"});
    auto m = smallModel(s);
    auto opt = optimizerOf(s, *m);
    auto* c = dynamic_cast<CapturableStep*>(&opt->torchOptimizer());
    REQUIRE(c != nullptr);
    CHECK(c->whyNotCapturable() == "");  // no gradients yet: nothing to step
    torch::manual_seed(1);
    m->forward(torch::randn({2, 1, 28, 28})).sum().backward();
    CHECK(c->whyNotCapturable() == "the parameters are not on CUDA");
  }

#if defined(EXPRUN_WITH_CUDA)
  TEST_CASE("a graphed run trains as the same run eager, and its replays never wait for the device (GPU only)") {
    if (!torch::cuda::is_available()) {
      MESSAGE("skipped: no CUDA device");
      return;
    }
    // 1000 images in batches of 128: 7 full steps and a last one of 104, which runs eagerly; two
    // epochs: warm-up (3 steps), a capture, replays, the eager last step, replays again.
    for (const auto& [precision, optimizer] : {std::pair<const char*, const char*>{"fp32", "sgd"}, {"bf16", "sgd"},
                                                {"fp16", "sgd"}, {"fp16", "adamw"}}) {
      CAPTURE(precision);
      CAPTURE(optimizer);
      auto runWith = [&](bool graph) {
        std::vector<std::string> sets{"train.device=cuda", std::string("train.precision=") + precision,
                                      "data.train_limit=1000", "train.epochs=2", "train.max_steps=0",
                                      std::string("train.cuda_graph=") + (graph ? "true" : "false"), "optimizer.impl=fused"};
        if (std::string(optimizer) == "adamw") sets.push_back("optimizer={type: adamw, lr: 0.001, base_batch: 64, impl: fused}");
        return test::trainSmallRun(sets);
      };
      const TrainOutcome eager = runWith(false), graphed = runWith(true);
      const auto& ee = eager.result["epochs"];
      const auto& ge = graphed.result["epochs"];
      REQUIRE(ge.size() == 2);
      for (std::size_t e = 0; e < 2; ++e) {
        const double a = ee[e]["train_loss"].get<double>(), b = ge[e]["train_loss"].get<double>();
        MESSAGE("epoch " << e + 1 << " train loss eager " << a << ", graphed " << b);
        CHECK(std::abs(a - b) <= 1e-3 * std::abs(a));
        CHECK(ge[e].value("skipped_steps", 0) == ee[e].value("skipped_steps", 0));
        CHECK(ge[e].value("loss_scale", 1.0) == ee[e].value("loss_scale", 1.0));
        CHECK(ge[e]["breakdown"]["parts"]["cuda_graph"]["mean_s"].get<double>() > 0);  // replayed
      }
      CHECK(test::maxParameterDiff(*eager.model, *graphed.model) < 1e-2);
    }
    // Synchronisations of graphed runs of 6 and 12 steps (warm-up and capture in both, both ending
    // inside the one 16-step epoch of 2,048 images; at the spec's 1,024 both would stop at step 8): equal.
    struct Counter : c10::WarningHandler {
      int syncs = 0;
      void process(const c10::Warning& w) override {
        if (w.msg().find("synchroniz") != std::string::npos) ++syncs;
      }
    };
    auto syncsIn = [&](int steps) {
      Counter counter;
      c10::WarningUtils::WarningHandlerGuard guard(&counter);
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
      test::trainSmallRun({"train.device=cuda", "train.precision=fp16", "train.cuda_graph=true", "data.train_limit=2048",
                           "optimizer.impl=fused", "train.max_steps=" + std::to_string(steps)});
      c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
      return counter.syncs;
    };
    CHECK(syncsIn(12) == syncsIn(6));
  }
#endif
}
