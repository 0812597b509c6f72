// Purpose: every expected plugin is registered (the linker dropped none), names are unique,
// and the catalog lists options from the same declarations validation uses.
#include "runner/registry/Plugins.h"

#include "tests/TestUtil.h"

using namespace exprun;

TEST_SUITE("registry") {
  TEST_CASE("every expected plugin is registered") {
    const auto& c = Catalog::instance();
    CHECK(c.names("model") == std::vector<std::string>{"resnet101", "resnet152", "resnet18", "resnet34", "resnet50", "small_cnn"});
    CHECK(c.names("data") == std::vector<std::string>{"fashion_mnist", "imagefolder", "synthetic"});
    CHECK(c.names("optimizer") == std::vector<std::string>{"adamw", "sgd"});
    CHECK(c.names("scheduler") == std::vector<std::string>{"constant", "cosine", "multistep", "step"});
    CHECK(c.names("comm") == std::vector<std::string>{"allreduce", "allreduce_after_backward", "bf16_compress",
                                                      "fp16_compress", "none"});
    CHECK(c.kinds() == std::vector<std::string>{"comm", "data", "model", "optimizer", "scheduler"});
  }

  TEST_CASE("a duplicate name is rejected") {
    CHECK_THROWS_AS(modelRegistry().add("resnet18", "again", {}, ModelFactory{}), std::logic_error);
    CHECK_THROWS_AS(Catalog::instance().add(PluginInfo{"scheduler", "cosine", "again", {}}), std::logic_error);
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
                                            "decay_norm_and_bias"});
    CHECK(Catalog::instance().find("model", "nonexistent") == nullptr);
    CHECK_THROWS_AS(modelRegistry().get("nonexistent"), std::runtime_error);
  }
}
