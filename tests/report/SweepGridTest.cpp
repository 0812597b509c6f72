// Purpose: `exprun sweep` grids — parsing, expansion order and run names, duplicate and unknown
// keys, invalid values named by their grid entry, and --print specs loaded back by the spec loader.
#include "runner/report/Sweep.h"

#include <filesystem>

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {

const char* kTinySpec = R"(name: small-cnn
model: {type: small_cnn, width: 8, hidden: 16}
data: {type: fashion_mnist, train_limit: 256, test_limit: 128}
optimizer: {type: sgd, lr: 0.2}
train: {epochs: 1, batch_size: 32, max_steps: 2}
output: {dir: results/tiny}
)";

std::vector<std::string> names(const std::vector<SweepRun>& runs) {
  std::vector<std::string> v;
  for (const auto& r : runs) v.push_back(r.name);
  return v;
}

}  // namespace

TEST_SUITE("sweep_grid") {
  TEST_CASE("grid entries: key, values split outside brackets, errors name the entry") {
    GridAxis g = parseGridArg("train.batch_size=32, 64,128");
    CHECK(g.key == "train.batch_size");
    CHECK(g.values == std::vector<std::string>{"32", "64", "128"});
    CHECK(parseGridArg("scheduler.milestones=[2,4],[3, 6]").values == std::vector<std::string>{"[2,4]", "[3, 6]"});
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("train.batch_size"), "--grid 'train.batch_size'",
                            "key.path=value1");
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("train.batch_size=32,,64"), "--grid 'train.batch_size=32,,64'",
                            "empty value");
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("optimizer.lr=0.1,0.1"), "value '0.1' is listed twice");
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("train..x=1"), "not a key path");
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("name=a,b"), "'name' cannot be swept");
    CHECK_THROWS_CONTAINING(SweepError, parseGridArg("output.dir=a,b"), "use --out");
  }

  TEST_CASE("expansion: cartesian product, first grid slowest, names from the last key component") {
    auto runs =
        expandGrid("small-cnn", {parseGridArg("train.batch_size=64,128"), parseGridArg("optimizer.lr=0.1,0.2,0.4")});
    REQUIRE(runs.size() == 6);
    CHECK(names(runs) ==
          std::vector<std::string>{"small-cnn__batch_size-64__lr-0.1", "small-cnn__batch_size-64__lr-0.2",
                                   "small-cnn__batch_size-64__lr-0.4", "small-cnn__batch_size-128__lr-0.1",
                                   "small-cnn__batch_size-128__lr-0.2", "small-cnn__batch_size-128__lr-0.4"});
    CHECK(runs[4].sets == std::vector<std::string>{"train.batch_size=128", "optimizer.lr=0.2"});
    // One grid, one value: one run.
    CHECK(names(expandGrid("b", {parseGridArg("seed=3")})) == std::vector<std::string>{"b__seed-3"});
  }

  TEST_CASE("run names: whole key paths when last components clash; values sanitised") {
    auto runs = expandGrid("x", {parseGridArg("model.width=8"), parseGridArg("data.width=[1, 2]")});
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].name == "x__model.width-8__data.width-1_2");
    CHECK(sanitizeNameValue("[2, 4]") == "2_4");
    CHECK(sanitizeNameValue("1.0e-4") == "1.0e-4");
    CHECK(sanitizeNameValue("[]") == "none");
    CHECK(sanitizeNameValue("a/b c") == "a_b_c");
    CHECK_THROWS_CONTAINING(SweepError, expandGrid("x", {parseGridArg("scheduler.milestones=[2,4],[2, 4]")}),
                            "both give the run name 'x__milestones-2_4'");
  }

  TEST_CASE("a key in two grids, or no grid, is an error") {
    CHECK_THROWS_CONTAINING(SweepError,
                            expandGrid("x", {parseGridArg("optimizer.lr=0.1"), parseGridArg("train.epochs=1,2"),
                                             parseGridArg("optimizer.lr=0.2")}),
                            "--grid optimizer.lr", "two grids (#1 and #3)");
    CHECK_THROWS_CONTAINING(SweepError, expandGrid("x", {}), "no --grid");
  }

  TEST_CASE("unknown keys and invalid values are refused before anything runs, naming the grid entry") {
    TempDir dir;
    const std::string spec = dir.file("tiny.yaml");
    writeText(spec, kTinySpec);
    CHECK_THROWS_CONTAINING(SweepError, prepareSweep(spec, {"optimizer.lr=0.1", "train.batchsize=32,64"}, {}, ""),
                            "--grid train.batchsize=32,64: value '32'", "unknown option 'batchsize'",
                            "did you mean 'batch_size'");
    CHECK_THROWS_CONTAINING(SweepError, prepareSweep(spec, {"train.batch_size=64,-3"}, {}, ""),
                            "--grid train.batch_size=64,-3: value '-3'", "out of range");
    CHECK_THROWS_CONTAINING(SweepError, prepareSweep(spec, {"train.precision=bf16,fp8"}, {}, ""), "value 'fp8'",
                            "invalid value 'fp8'");
    // Changing the model type keeps the spec's small_cnn options, which resnet18 does not take.
    CHECK_THROWS_CONTAINING(SweepError, prepareSweep(spec, {"model.type=small_cnn,resnet18"}, {}, ""), "value 'resnet18'",
                            "unknown option");
    CHECK_THROWS_CONTAINING(SpecError, prepareSweep(dir.file("none.yaml"), {"optimizer.lr=0.1"}, {}, ""), "not found");
  }

  TEST_CASE("sweep: resolved specs per run, --set under the grid, output dir from the spec or --out") {
    TempDir dir;
    const std::string spec = dir.file("tiny.yaml");
    writeText(spec, kTinySpec);
    Sweep sweep = prepareSweep(spec, {"train.batch_size=16,32", "optimizer.lr=0.05,0.1"}, {"seed=7"}, "");
    REQUIRE(sweep.specs.size() == 4);
    CHECK(sweep.baseName == "small-cnn");
    CHECK(sweep.outDir == "results/tiny");
    CHECK(sweep.specs[1].name == "small-cnn__batch_size-16__lr-0.1");
    CHECK(sweep.specs[1].train.batching.batchSize == 16);
    CHECK(test::optionValue<double>(sweep.specs[1].optimizer, "lr") == doctest::Approx(0.1));
    CHECK(sweep.specs[3].seed == 7);
    CHECK(prepareSweep(spec, {"optimizer.lr=0.05"}, {}, dir.file("out")).specs[0].output.dir ==
          dir.file("out"));
  }

  TEST_CASE("--print: one resolved YAML per run that the spec loader accepts as it is, and runs.txt") {
    TempDir dir;
    const std::string spec = dir.file("tiny.yaml");
    writeText(spec, kTinySpec);
    Sweep sweep = prepareSweep(spec, {"train.batch_size=16,32", "scheduler.type=constant,cosine"}, {}, "");
    const std::string out = dir.file("print");
    auto paths = writeSweepSpecs(sweep, out);
    REQUIRE(paths.size() == 4);
    for (std::size_t i = 0; i < paths.size(); ++i) {
      Spec back = loadSpec(paths[i]);
      CHECK(back.name == sweep.runs[i].name);
      CHECK(back.toJson() == sweep.specs[i].toJson());
    }
    CHECK(loadSpec(paths[2]).train.batching.batchSize == 32);
    CHECK(loadSpec(paths[2]).scheduler.type() == "constant");
    CHECK(paths[3] == (std::filesystem::path(out) / "small-cnn__batch_size-32__type-cosine.yaml").string());
    const std::string list = readText(out + "/runs.txt");
    std::string expected;
    for (const auto& p : paths) expected += std::filesystem::absolute(p).lexically_normal().string() + "\n";
    CHECK(list == expected);
  }
}
