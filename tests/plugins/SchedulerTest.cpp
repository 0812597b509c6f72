// Purpose: learning-rate values of every schedule at warmup start/end and at decay points, and LR scaling.
#include "runner/api/Schedule.h"
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
std::unique_ptr<LrSchedule> make(const std::vector<std::string>& sets, ScheduleContext ctx) {
  Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n", "s.yaml", sets);
  return registry<SchedulerKind>().get(s.scheduler.type())(s.scheduler, ctx);
}
}  // namespace

TEST_SUITE("schedulers") {
  TEST_CASE("constant with warmup in steps") {
    auto s = make({"scheduler.type=constant", "scheduler.warmup_steps=10", "scheduler.warmup_start_factor=0.0"},
                  {0.4, 100, 1000});
    CHECK(s->lr(0) == doctest::Approx(0.0));
    CHECK(s->lr(5) == doctest::Approx(0.2));
    CHECK(s->lr(10) == doctest::Approx(0.4));
    CHECK(s->lr(999) == doctest::Approx(0.4));
  }

  TEST_CASE("warmup in epochs starts at warmup_start_factor") {
    auto s = make({"scheduler.warmup_epochs=5", "scheduler.warmup_start_factor=0.1"}, {0.4, 100, 10000});
    CHECK(s->lr(500) == doctest::Approx(0.4));  // 5 epochs of 100 steps
    CHECK(s->lr(0) == doctest::Approx(0.04));
    CHECK(s->lr(250) == doctest::Approx(0.04 + 0.36 * 0.5));
    CHECK(s->lr(499) < 0.4);
    CHECK(s->lr(500) == doctest::Approx(0.4));
  }

  TEST_CASE("step decays every step_epochs") {
    auto s = make({"scheduler.type=step", "scheduler.step_epochs=2", "scheduler.gamma=0.5"}, {1.0, 10, 100});
    CHECK(s->lr(0) == doctest::Approx(1.0));
    CHECK(s->lr(19) == doctest::Approx(1.0));
    CHECK(s->lr(20) == doctest::Approx(0.5));
    CHECK(s->lr(40) == doctest::Approx(0.25));
  }

  TEST_CASE("multistep decays at absolute milestone epochs, warmup first") {
    auto s = make({"scheduler.type=multistep", "scheduler.milestones=[30, 60, 80]", "scheduler.warmup_epochs=5"},
                  {0.1, 10, 900});
    CHECK(s->lr(0) == doctest::Approx(0.01));
    CHECK(s->lr(50) == doctest::Approx(0.1));
    CHECK(s->lr(299) == doctest::Approx(0.1));
    CHECK(s->lr(300) == doctest::Approx(0.01));
    CHECK(s->lr(600) == doctest::Approx(0.001));
    CHECK(s->lr(800) == doctest::Approx(0.0001));
  }

  TEST_CASE("cosine goes from lr after warmup to min_factor x lr at the last step") {
    auto s = make({"scheduler.type=cosine", "scheduler.warmup_steps=100", "scheduler.min_factor=0.1"}, {1.0, 10, 1100});
    CHECK(s->lr(100) == doctest::Approx(1.0));
    CHECK(s->lr(600) == doctest::Approx(0.55));  // half way: (1 + 0.1) / 2
    CHECK(s->lr(1100) == doctest::Approx(0.1));
    CHECK(s->lr(350) > s->lr(351));
  }

  TEST_CASE("learning-rate scaling rules") {
    CHECK(scaleLearningRate(0.1, 256, 1024, "linear") == doctest::Approx(0.4));  // the reference case
    CHECK(scaleLearningRate(0.1, 256, 64, "linear") == doctest::Approx(0.025));
    CHECK(scaleLearningRate(0.1, 256, 1024, "sqrt") == doctest::Approx(0.2));
    CHECK(scaleLearningRate(0.1, 256, 1024, "none") == doctest::Approx(0.1));
    CHECK_THROWS_AS(scaleLearningRate(0.1, 256, 1024, "cubic"), std::invalid_argument);
  }
}
