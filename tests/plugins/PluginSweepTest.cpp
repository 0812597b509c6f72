// Purpose: every registered model, optimizer and scheduler runs one real training step
// (the ggml habit: one test sweeps every plugin), so a new plugin is exercised without new code.
#include "runner/Compat.h"
#include "runner/registry/Plugins.h"
#include "runner/spec/Spec.h"
#include "runner/train/Schedule.h"

#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("sweep") {
  TEST_CASE("every model x sgd takes a step that changes its parameters and gives a finite loss") {
    torch::manual_seed(0);
    for (const auto& name : Catalog::instance().names("model")) {
      CAPTURE(name);
      Spec s = loadSpecFromString("name: t\nmodel: {type: " + name + "}\ndata: {type: synthetic}\n", "s.yaml");
      DataInfo info{1, 28, 28, 10};
      auto m = modelRegistry().get(name)(s.model, info);
      auto opt = optimizerRegistry().get("sgd")(s.optimizer, *m, 0.01);
      auto before = m->parameters().back().clone();
      torch::Tensor loss = torch::nn::functional::cross_entropy(m->forward(torch::randn({2, 1, 28, 28})),
                                                                torch::tensor({1, 3}, torch::kInt64));
      loss.backward();
      opt->step();
      CHECK(std::isfinite(loss.item<double>()));
      CHECK_FALSE(torch::equal(before, m->parameters().back()));
    }
  }

  TEST_CASE("every optimizer and scheduler runs a step") {
    for (const auto& opt : Catalog::instance().names("optimizer"))
      for (const auto& sched : Catalog::instance().names("scheduler")) {
        CAPTURE(opt);
        CAPTURE(sched);
        Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn, width: 4, hidden: 8}\ndata: {type: synthetic}\n",
                                    "s.yaml", {"optimizer.type=" + opt, "scheduler.type=" + sched});
        auto m = modelRegistry().get("small_cnn")(s.model, DataInfo{1, 28, 28, 10});
        auto o = optimizerRegistry().get(opt)(s.optimizer, *m, 0.01);
        auto schedule = schedulerRegistry().get(sched)(s.scheduler, ScheduleContext{0.01, 10, 100});
        compat::setLearningRate(*o, schedule->lr(0));
        m->forward(torch::randn({2, 1, 28, 28})).sum().backward();
        o->step();
        CHECK(compat::learningRate(*o) == doctest::Approx(schedule->lr(0)));
        CHECK(schedule->lr(50) > 0.0);
      }
  }
}
