// Purpose: catalog-driven tests (the ggml habit: one test sweeps every plugin): every registered
// model takes a real training step, every optimizer runs with every scheduler over a whole run,
// and every data plugin builds from a fixture (its defaults, or the files it needs: a new data
// plugin that needs files adds them to the table here) and gives batches of its declared shape;
// every comm hook is swept on two ranks in tests/step/ReducerTest.cpp. A new model, optimizer,
// scheduler or comm plugin is exercised here without new code (a model of tokens is listed once).
#include <cstdlib>
#include <map>

#include "runner/api/Model.h"
#include "runner/api/Schedule.h"
#include "runner/api/Task.h"
#include "runner/data/CharText.h"
#include "runner/spec/Spec.h"
#include "runner/util/Compat.h"
#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("sweep") {
  TEST_CASE("every model x sgd takes a step that changes its parameters and gives a finite loss") {
    torch::manual_seed(0);
    // The models of tokens (the others take 28x28 images of 10 classes), with their options for a small one.
    const std::map<std::string, std::string> tokenModels{{"gpt", ", n_layer: 1, n_head: 2, n_embd: 16, block_size: 8"}};
    // Image models whose defaults do not take 28x28 (ViT-B/16's 16-pixel patches), with options that do.
    const std::map<std::string, std::string> imageOptions{
        {"vit", ", patch_size: 7, num_layers: 1, num_heads: 2, hidden_dim: 16, mlp_dim: 32"}};
    for (const auto& name : Catalog::instance().names("model")) {
      CAPTURE(name);
      const auto tokens = tokenModels.find(name);
      const bool lm = tokens != tokenModels.end();
      const auto image = imageOptions.find(name);
      Spec s = loadSpecFromString("name: t\nmodel: {type: " + name +
                                      (lm ? tokens->second : image != imageOptions.end() ? image->second : "") +
                                      "}\ndata: {type: synthetic}\ntask: {type: " +
                                      (lm ? "language_model" : "classification") + "}\n",
                                  "s.yaml");
      const DataInfo info = lm ? DataInfo{0, 0, 0, 10, 10, 8} : DataInfo{1, 28, 28, 10};
      auto task = build<TaskKind>(s.task);
      auto m = build<ModelKind>(s.model, info);
      auto opt = build<OptimizerKind>(s.optimizer, trainableParameters(*m), 0.01);
      auto before = m->parameters().back().clone();
      m->train();
      const Batch b = task->probe(info, 2);
      torch::Tensor loss = task->loss(m->forward(b.x), b.y, torch::Tensor(), 0.0);
      loss.backward();
      opt->torchOptimizer().step();
      CHECK(std::isfinite(loss.item<double>()));
      CHECK_FALSE(torch::equal(before, m->parameters().back()));
      m->eval();
      const Batch one = task->probe(info, 1);
      std::vector<std::int64_t> want{1, 10};
      if (lm) want = {1, 8, 10};
      CHECK(m->forward(one.x).sizes() == want);
    }
  }

  TEST_CASE("every optimizer and scheduler runs a step; every schedule is positive and finite over the run") {
    for (const auto& opt : Catalog::instance().names("optimizer"))
      for (const auto& sched : Catalog::instance().names("scheduler")) {
        CAPTURE(opt);
        CAPTURE(sched);
        Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn, width: 4, hidden: 8}\ndata: {type: synthetic}\n",
                                    "s.yaml", {"optimizer.type=" + opt, "scheduler.type=" + sched});
        auto m = build<ModelKind>(s.model, DataInfo{1, 28, 28, 10});
        auto o = build<OptimizerKind>(s.optimizer, trainableParameters(*m), 0.01);
        auto schedule = build<SchedulerKind>(s.scheduler, ScheduleContext{0.01, 10, 100});
        o->setLearningRate(schedule->lr(0));
        m->forward(torch::randn({2, 1, 28, 28})).sum().backward();
        o->torchOptimizer().step();
        CHECK(o->learningRate() == doctest::Approx(schedule->lr(0)));
        for (std::int64_t step = 0; step < 100; ++step) {
          CHECK(std::isfinite(schedule->lr(step)));
          CHECK(schedule->lr(step) > 0.0);
          CHECK(schedule->lr(step) <= 0.01 * (1 + 1e-12));
        }
      }
  }

  TEST_CASE("every data plugin builds from a fixture and yields batches of its declared shape") {
    // What each plugin needs beyond its defaults: real files (a plugin missing here fails, so that
    // none passes without being built).
    const char* images = std::getenv("EXPRUN_TEST_IMAGES");
    REQUIRE_MESSAGE(images != nullptr, "EXPRUN_TEST_IMAGES is not set: run through CTest (its fixture builds the image tree)");
    test::TempDir text;
    test::writeText(text.file("t.txt"), std::string(400, 'a') + "The quick brown fox jumps over the lazy dog.\n");
    prepareCharText(text.file("t.txt"), text.file("tok"));
    const std::map<std::string, std::vector<std::string>> fixtures{
        {"fashion_mnist", {}},  // Debian's dataset-fashion-mnist
        {"synthetic", {}},
        {"imagefolder", {"data.root=" + std::string(images) + "/good", "data.cache_dir=off"}},
        {"tokens", {"data.dir=" + text.file("tok"), "data.block_size=8"}},
    };
    for (const auto& name : Catalog::instance().names("data")) {
      CAPTURE(name);
      const auto fixture = fixtures.find(name);
      REQUIRE_MESSAGE(fixture != fixtures.end(), "data plugin '" << name << "' has no fixture in this test");
      std::vector<std::string> sets = fixture->second;
      sets.push_back("data.type=" + name);
      const Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n", "s.yaml", sets);
      std::unique_ptr<Dataset> data = build<DataKind>(s.data);
      data->load();
      const DataInfo info = data->info();
      for (Split split : {Split::Train, Split::Test}) {
        REQUIRE(data->size(split) >= 2);
        Batch b = data->makeBatch(split, {0, data->size(split) - 1}, 7);
        if (info.vocabSize > 0) {  // token windows: inputs and their next tokens
          CHECK(b.x.sizes() == std::vector<std::int64_t>{2, info.sequenceLength});
          CHECK((b.x.scalar_type() == torch::kInt64));
          CHECK(b.y.sizes() == b.x.sizes());
          CHECK(b.x.max().item<std::int64_t>() < info.vocabSize);
        } else {
          CHECK(b.x.sizes() == std::vector<std::int64_t>{2, info.channels, info.height, info.width});
          CHECK((b.x.scalar_type() == torch::kFloat32));
          CHECK(b.y.sizes() == std::vector<std::int64_t>{2});
        }
        CHECK(b.y.min().item<std::int64_t>() >= 0);
        CHECK(b.y.max().item<std::int64_t>() < info.numClasses);
        if (b.x.is_floating_point()) CHECK(torch::isfinite(b.x).all().item<bool>());
      }
    }
  }
}
