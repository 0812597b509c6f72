// Purpose: reading stored specs (runner/spec/StoredSpec.h) is held to the real option tables: what a
// resolved spec's JSON holds is what the accessors read, and the options exprun chooses are the
// ones copied; the catalog's JSON (exprun plugins --json, the fuzzer's catalog) reads back as it was.
#include "runner/spec/StoredSpec.h"

#include "runner/checkpoint/CheckpointStore.h"
#include "runner/spec/Catalog.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

using namespace exprun;

namespace {
const char* kStoredSpec = R"(name: s
model: {type: small_cnn}
data: {type: fashion_mnist}
train: {batch_size: 48, accumulate: 3, precision: bf16, activation_checkpointing: [features]}
)";
}  // namespace

TEST_SUITE("stored_spec") {
  TEST_CASE("the accessors read what a resolved spec writes") {
    const Spec spec = loadSpecFromString(kStoredSpec, "s.yaml");
    const nlohmann::json j = spec.toJson();
    CHECK(storedPrecision(j) == std::optional<std::string>("bf16"));
    CHECK(storedMicroBatch(j) == std::optional<std::int64_t>(48));
    CHECK(storedAccumulate(j) == 3);
    const nlohmann::json planned = loadSpecFromString(kStoredSpec, "s.yaml", {"train.batch_size=auto"}).toJson();
    CHECK_FALSE(storedMicroBatch(planned).has_value());
    CHECK_FALSE(storedPrecision(nlohmann::json::object()).has_value());  // an older file without the spec
    CHECK(storedAccumulate(nlohmann::json::object()) == 1);
  }

  TEST_CASE("the options exprun chooses are copied, nothing else") {
    const nlohmann::json theirs = loadSpecFromString(kStoredSpec, "s.yaml").toJson();
    nlohmann::json mine = loadSpecFromString(kStoredSpec, "s.yaml",
                                             {"train.batch_size=16", "train.accumulate=9", "train.precision=fp32",
                                              "train.activation_checkpointing=[]", "train.epochs=7"})
                              .toJson();
    nlohmann::json accumulation = mine;
    copyChosenOptions(accumulation, theirs, false);
    CHECK(jsonDifferences(theirs, accumulation).size() == 4u);  // batch_size, precision, stages, epochs
    copyChosenOptions(mine, theirs, true);
    const auto left = jsonDifferences(theirs, mine);
    REQUIRE(left.size() == 1u);
    CHECK(left[0].find("train.epochs") == 0);
  }

  TEST_CASE("a stored spec reads back as today's exprun reads it: options added since at their defaults") {
    const nlohmann::json full = loadSpecFromString(kStoredSpec, "s.yaml").toJson();
    CHECK(storedSpecAsReadToday(full) == full);
    nlohmann::json older = full;  // written before train.input and train.copy_ahead existed
    older["train"].erase("input");
    older["train"].erase("copy_ahead");
    CHECK(jsonDifferences(older, full).size() == 2u);
    CHECK(jsonDifferences(storedSpecAsReadToday(older), full).empty());
    CHECK(storedBeforeInputFormat(older));
    CHECK_FALSE(storedBeforeInputFormat(full));
    CHECK_FALSE(storedBeforeInputFormat(nlohmann::json::object()));
    nlohmann::json changed = older;  // a real difference stays one
    changed["train"]["epochs"] = 77;
    CHECK(jsonDifferences(storedSpecAsReadToday(changed), full).size() == 1u);
    nlohmann::json removed = full;  // an option this exprun does not know: returned as stored
    removed["train"]["an_option_removed_since"] = 1;
    CHECK(storedSpecAsReadToday(removed) == removed);
    CHECK(jsonDifferences(storedSpecAsReadToday(removed), full).size() == 1u);
  }

  TEST_CASE("a stored spec holding defaults that changed since is taken as today's where the run says nothing else") {
    const nlohmann::json today = loadSpecFromString(kStoredSpec, "s.yaml").toJson();
    // The table's `today` is what the option tables declare now.
    for (const ChangedDefault& c : changedDefaults()) {
      CAPTURE(c.key);
      REQUIRE(today.contains(c.section));
      CHECK(today[c.section].at(c.key) == c.today);
      CHECK(c.former != c.today);
    }
    nlohmann::json stored = today;  // as written when the former defaults were the defaults
    for (const ChangedDefault& c : changedDefaults()) stored[c.section][c.key] = c.former;
    REQUIRE(jsonDifferences(stored, today).size() == changedDefaults().size());
    nlohmann::json adopted = stored;
    const auto notes = adoptChangedDefaults(adopted, today);
    CHECK(notes.size() == changedDefaults().size());
    CHECK(jsonDifferences(adopted, today).empty());
    // A run that asks for something else keeps the difference (it is a real one).
    nlohmann::json asked = today;
    asked["optimizer"]["impl"] = "fused";
    nlohmann::json kept = stored;
    CHECK(adoptChangedDefaults(kept, asked).size() == changedDefaults().size() - 1);
    CHECK(kept["optimizer"]["impl"] == "auto");
    // So does a stored value other than the former default.
    nlohmann::json other = today;
    other["train"]["copy_ahead"] = 5;
    CHECK(adoptChangedDefaults(other, today).empty());
    CHECK(other["train"]["copy_ahead"] == 5);
  }

  TEST_CASE("the catalog's JSON reads back as it was") {
    const nlohmann::json all = Catalog::instance().toJson();
    REQUIRE(all.contains("model"));
    Catalog copy;
    copy.addFromJson(all);
    CHECK(copy.toJson() == all);
    CHECK(copy.kinds() == Catalog::instance().kinds());
    CHECK_THROWS_AS(copy.addFromJson(all), std::logic_error);  // duplicates are refused, as registering twice is
  }
}
