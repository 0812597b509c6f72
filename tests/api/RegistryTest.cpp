// Purpose: the plugins exprun shipped with are registered (the linker dropped none; each newer
// plugin's own test checks its own name), names are unique, and the catalog lists options from
// the same declarations validation uses.
#include "runner/api/Model.h"

#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("registry") {
  TEST_CASE("every plugin exprun shipped with is registered, under the seven kinds") {
    const auto& c = Catalog::instance();
    auto has = [&](const std::string& kind, std::vector<std::string> names) {
      for (const auto& n : names) CHECK_MESSAGE(c.find(kind, n) != nullptr, kind << " " << n);
    };
    has("model", {"gpt", "resnet101", "resnet152", "resnet18", "resnet34", "resnet50", "small_cnn"});
    has("data", {"fashion_mnist", "imagefolder", "synthetic", "tokens"});
    has("task", {"classification", "language_model"});
    has("optimizer", {"adamw", "sgd"});
    has("scheduler", {"constant", "cosine", "multistep", "step"});
    has("comm", {"allreduce", "allreduce_after_backward", "bf16_compress", "fp16_compress", "none"});
    has("pruner", {"bn_scale", "l1_filter"});
    has("method", {"int8", "prune"});
    CHECK(c.kinds() == std::vector<std::string>{"comm", "data", "method", "model", "optimizer", "pruner", "scheduler", "task"});
  }

  TEST_CASE("a duplicate name is rejected") {
    CHECK_THROWS_AS((Register<ModelKind>{"resnet18", "again", {}, ModelKind::Factory{}}), std::logic_error);
    PluginInfo again;
    again.kind = "scheduler";
    again.name = "cosine";
    CHECK_THROWS_AS(Catalog::instance().add(again), std::logic_error);
  }

  TEST_CASE("options are declared with help and defaults") {
    const PluginInfo* sgd = Catalog::instance().find("optimizer", "sgd");
    REQUIRE(sgd != nullptr);
    std::vector<std::string> names;
    for (const auto& d : sgd->options) {
      names.push_back(d.name);
      CHECK_FALSE(d.help.empty());
    }
    CHECK(names == std::vector<std::string>{"lr", "base_batch", "scale_lr", "momentum", "nesterov", "weight_decay",
                                            "decay_norm_and_bias", "impl"});
    CHECK(Catalog::instance().find("model", "nonexistent") == nullptr);
    CHECK_THROWS_AS(registry<ModelKind>().get("nonexistent"), std::runtime_error);
  }
}
