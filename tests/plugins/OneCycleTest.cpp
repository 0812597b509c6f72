// Purpose: scheduler `onecycle` equals torch.optim.lr_scheduler.OneCycleLR step by step — learning
// rate and momentum, reference values from the venv's torch — with cosine and linear annealing,
// three phases, other factors and no momentum cycling; the trainer sets the cycled momentum on
// SGD and beta1 on AdamW.
#include "runner/train/Setup.h"
#include "runner/util/Compat.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {

const char* kReference = R"PY(
import json, sys, torch
out = []
for cfg in json.loads(sys.argv[1]):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    total, max_lr = cfg.pop("total_steps"), cfg.pop("max_lr")
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=max_lr, total_steps=total, **cfg)
    steps = []
    for _ in range(total):
        steps.append([opt.param_groups[0]["lr"], opt.param_groups[0]["momentum"]])
        opt.step()
        sched.step()
    out.append(steps)
print(json.dumps(out))
)PY";

struct Case {
  std::vector<std::string> sets;  // exprun's scheduler options
  nlohmann::json torch;           // the same for OneCycleLR
  std::int64_t totalSteps;
};

}  // namespace

TEST_SUITE("onecycle") {
  TEST_CASE("registered, with PyTorch's defaults") {
    REQUIRE(Catalog::instance().find("scheduler", "onecycle") != nullptr);
    Spec s = loadSpecFromString(
        "name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\nscheduler: {type: onecycle}\n", "s.yaml");
    CHECK(test::optionValue<double>(s.scheduler, "pct_start") == 0.3);
    CHECK(test::optionValue<std::string>(s.scheduler, "anneal_strategy") == "cos");
    CHECK(test::optionValue<double>(s.scheduler, "div_factor") == 25.0);
    CHECK(test::optionValue<double>(s.scheduler, "final_div_factor") == 1e4);
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n"
                                               "scheduler: {type: onecycle, anneal_strategy: cosine}\n",
                                               "s.yaml"),
                            "scheduler.anneal_strategy", "valid: cos, linear");
  }

  TEST_CASE("learning rate and momentum equal torch.optim.lr_scheduler.OneCycleLR at every step") {
    const double maxLr = 0.4;
    const std::vector<Case> cases{
        {{}, {}, 100},
        {{"anneal_strategy=linear", "pct_start=0.25", "div_factor=10", "final_div_factor=100"},
         {{"anneal_strategy", "linear"}, {"pct_start", 0.25}, {"div_factor", 10.0}, {"final_div_factor", 100.0}},
         37},
        {{"three_phase=true", "base_momentum=0.8", "max_momentum=0.9"},
         {{"three_phase", true}, {"base_momentum", 0.8}, {"max_momentum", 0.9}},
         50},
        {{"cycle_momentum=false", "pct_start=0.5"}, {{"cycle_momentum", false}, {"pct_start", 0.5}}, 11},
    };
    nlohmann::json configs = nlohmann::json::array();
    for (const auto& c : cases) {
      nlohmann::json cfg = c.torch.is_null() ? nlohmann::json::object() : c.torch;
      cfg["total_steps"] = c.totalSteps;
      cfg["max_lr"] = maxLr;
      configs.push_back(cfg);
    }
    const auto reference = nlohmann::json::parse(test::runPython(kReference, {configs.dump()}));
    REQUIRE(reference.size() == cases.size());
    for (std::size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      std::vector<std::string> sets{"scheduler.type=onecycle"};
      for (const auto& s : cases[i].sets) sets.push_back("scheduler." + s);
      Spec spec = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "s.yaml", sets);
      auto schedule = build<SchedulerKind>(spec.scheduler, ScheduleContext{maxLr, 10, cases[i].totalSteps});
      double worst = 0;
      for (std::int64_t step = 0; step < cases[i].totalSteps; ++step) {
        const double lr = reference[i][step][0], momentum = reference[i][step][1];
        worst = std::max(worst, std::abs(schedule->lr(step) - lr) / lr);
        const auto m = schedule->momentum(step);
        if (test::optionValue<bool>(spec.scheduler, "cycle_momentum")) {
          REQUIRE(m.has_value());
          worst = std::max(worst, std::abs(*m - momentum) / momentum);
        } else {
          CHECK_FALSE(m.has_value());
          CHECK(momentum == 0.9);  // torch leaves the optimizer's own
        }
      }
      MESSAGE("case " << i << ": largest relative difference from torch " << worst);
      CHECK(worst <= 1e-12);
    }
  }

  TEST_CASE("the trainer sets the cycled momentum on SGD, beta1 on AdamW, and the lr from the scaled lr") {
    for (const char* optimizer : {"sgd", "adamw"}) {
      CAPTURE(optimizer);
      Spec spec = loadSpecFromString(
          "name: t\nmodel: {type: small_cnn, width: 4, hidden: 8}\n"
          "data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10, "
          "train_size: 640, test_size: 10}\n"
          "scheduler: {type: onecycle}\ntrain: {epochs: 2, batch_size: 64, threads: 1, workers: 0}\n",
          "s.yaml", {std::string("optimizer.type=") + optimizer, "optimizer.lr=0.8", "optimizer.base_batch=128"});
      Dist single;
      TrainSetup s = setUp(spec, single);
      REQUIRE(s.settings.totalSteps == 20);
      CHECK(s.settings.batch.lr == doctest::Approx(0.4));  // 0.8 per 128, scaled to 64
      for (std::int64_t step : {0, 5, 19}) {
        const double lr = s.applySchedule(step);
        CHECK(s.learner.optimizer->learningRate() == lr);
        auto& options = s.learner.optimizer->torchOptimizer().param_groups()[0].options();
        const double expected = *s.schedule->momentum(step);
        if (auto* sgd = dynamic_cast<torch::optim::SGDOptions*>(&options)) CHECK(sgd->momentum() == expected);
        if (auto* adamw = dynamic_cast<torch::optim::AdamWOptions*>(&options))
          CHECK(std::get<0>(adamw->betas()) == expected);
      }
      CHECK(s.schedule->lr(0) == doctest::Approx(0.4 / 25));
      CHECK(s.schedule->lr(5) == doctest::Approx(0.4));  // the peak: pct_start 0.3 of 20 steps, step 5
    }
  }
}
