// Purpose: spec loading — every error kind with its location, inheritance, overrides, round trip.
#include "runner/spec/Spec.h"

#include "tests/TestUtil.h"

#include <chrono>
#include <fstream>
#include <functional>
#include <tuple>

using namespace exprun;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {
const char* kMinimal = R"(name: t
model: {type: small_cnn}
data: {type: fashion_mnist}
)";
}

TEST_SUITE("spec") {
  TEST_CASE("a minimal spec gets every default filled in") {
    Spec s = loadSpecFromString(kMinimal, "mem.yaml");
    CHECK(s.name == "t");
    CHECK(s.seed == 0);
    CHECK(s.model.type() == "small_cnn");
    CHECK(test::optionValue<std::int64_t>(s.model, "width") == 32);
    CHECK(s.optimizer.type() == "sgd");
    CHECK(test::optionValue<double>(s.optimizer, "lr") == doctest::Approx(0.1));
    CHECK(s.scheduler.type() == "constant");
    CHECK(s.train.batching.batchSize == 128);
    CHECK(s.output.dir == "results");
  }

  TEST_CASE("bounded YAML: an alias bomb, a 100 MB file and 100,000-deep nesting are refused within a second") {
    using Clock = std::chrono::steady_clock;
    auto quick = [](const std::function<void()>& f) {
      const auto t0 = Clock::now();
      f();
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    // "Billion laughs": 9 levels of 10 aliases each = 10^9 nodes once expanded.
    std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n";
    for (char c = 'b'; c <= 'j'; ++c) {
      const char p = static_cast<char>(c - 1);
      bomb += std::string(1, c) + ": &" + c + " [*" + p;
      for (int k = 0; k < 9; ++k) bomb += ", *" + std::string(1, p);
      bomb += "]\n";
    }
    bomb += std::string(kMinimal);
    double t = quick([&] {
      CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(bomb, "bomb.yaml"), "bomb.yaml:",
                              "expands to more than 100000 nodes");
    });
    CHECK(t < 1.0);

    TempDir dir;
    writeText(dir.file("big.yaml"), "# a comment\n");
    std::filesystem::resize_file(dir.file("big.yaml"), 100000000);  // 100 MB (sparse)
    t = quick([&] {
      CHECK_THROWS_CONTAINING(SpecError, loadSpec(dir.file("big.yaml"), {}), "big.yaml: the spec is 100000000 bytes",
                              "limited to 1048576 bytes");
    });
    CHECK(t < 1.0);

    const std::string flow = "x: " + std::string(100000, '[') + std::string(100000, ']') + "\n";
    std::string block = "x:\n";
    for (int i = 0; i < 100000; ++i) block += "- ";
    block += "1\n";
    for (const auto& c : {std::tuple{flow, "flow.yaml", "flow.yaml:1:"}, std::tuple{block, "block.yaml", "block.yaml:2:"}}) {
      const std::string& text = std::get<0>(c);
      const char* name = std::get<1>(c);
      const char* where = std::get<2>(c);
      t = quick([&] {
        CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(text, name), where, "nested more than 200 levels deep");
      });
      CHECK(t < 1.0);
    }
    // Found by the fuzzer (bench/fuzz_spec.sh): an alias that contains itself recursed until the
    // stack overflowed.
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString("a: &a [x, x]\nb: &b [*b, *a]\nc: [*b, *b]\nname: t\n", "self.yaml"),
                            "self.yaml:", "an alias that contains itself");
    // Also found by the fuzzer: a base file name too long for the filesystem threw
    // std::filesystem::filesystem_error instead of a SpecError.
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("base: " + std::string(5000, 'H') + ".yaml\nname: t\n", "long.yaml"),
                            "long.yaml:1:7: base: cannot look for base file");
    // A base with no size to check (/dev/zero) is read no further than the limit.
    t = quick([&] {
      CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("base: /dev/zero\nname: t\n", "zero.yaml"),
                              "/dev/zero: the spec is", "limited to 1048576 bytes");
    });
    CHECK(t < 1.0);
    // The same bounds hold for --set values; a real spec's nesting passes.
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"train.epochs=" + std::string(300, '[')}),
                            "--set", "nested more than 200 levels deep");
    for (const char* spec : {"/experiments/imagenet/resnet50-4gpu-optimized.yaml", "/experiments/fashion-mnist/fast.yaml"})
      CHECK_NOTHROW(loadSpec(std::string(EXPRUN_SOURCE_DIR) + spec, {}));
  }

  TEST_CASE("YAML syntax error names file, line and column") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: t\nmodel: {type: small_cnn\n", "bad.yaml"),
                            "bad.yaml:", "YAML syntax error");
  }

  TEST_CASE("unknown keys: section, option, with a suggestion") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "trian: {epochs: 1}\n", "s.yaml"),
                            "s.yaml:4:1", "unknown section 'trian'", "did you mean 'train'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {epoch: 1}\n", "s.yaml"),
                            "s.yaml:4:9", "train.epoch", "did you mean 'epochs'");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString("name: t\nmodel: {type: resnet18, zero_init: true}\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "model.zero_init", "unknown option 'zero_init' for model 'resnet18'", "zero_init_residual");
  }

  TEST_CASE("wrong types") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {epochs: three}\n", "s.yaml"),
                            "s.yaml:4:17", "train.epochs", "expected an integer, got 'three'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {eval: maybe}\n", "s.yaml"),
                            "train.eval", "expected true or false");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString(std::string(kMinimal) + "scheduler: {type: multistep, milestones: 30}\n", "s.yaml"),
                            "scheduler.milestones", "expected a list[int]");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "optimizer: {type: sgd, lr: [1]}\n", "s.yaml"),
                            "optimizer.lr", "expected a number");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: t\nmodel: small_cnn\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "s.yaml:2:8", "model", "expected a plugin node");
  }

  TEST_CASE("out-of-range values and invalid choices") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {batch_size: -1}\n", "s.yaml"),
                            "train.batch_size", "out of range", "at least 0");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {epochs: 0}\n", "s.yaml"),
                            "train.epochs", "out of range", "at least 1");
    const Spec autoBatch = loadSpecFromString(std::string(kMinimal) + "train: {batch_size: auto}\n", "s.yaml");
    CHECK_FALSE(autoBatch.train.batching.batchSize.has_value());
    CHECK(autoBatch.toJson()["train"]["batch_size"] == "auto");
    CHECK_FALSE(loadSpecFromString(autoBatch.toYaml(), "again.yaml").train.batching.batchSize.has_value());
    CHECK_FALSE(loadSpecFromString(std::string(kMinimal) + "train: {batch_size: 0}\n", "s.yaml").train.batching.batchSize.has_value());
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "train: {epochs: auto}\n", "s.yaml"),
                            "train.epochs", "expected an integer");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString(std::string(kMinimal) + "optimizer: {type: sgd, momentum: 1.5}\n", "s.yaml"),
                            "optimizer.momentum", "between 0.0 and 1.0");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString(std::string(kMinimal) + "optimizer: {type: sgd, scale_lr: linaer}\n", "s.yaml"),
                            "optimizer.scale_lr", "did you mean 'linear'", "valid: linear, sqrt, none");
  }

  TEST_CASE("unknown plugin type lists the valid ones") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: t\nmodel: {type: resnet19}\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "s.yaml:2:15", "unknown model type 'resnet19'", "did you mean 'resnet18'",
                            "resnet152", "small_cnn");
  }

  TEST_CASE("missing required keys") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("model: {type: small_cnn}\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "missing required key 'name'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: t\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "missing required section 'model'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: t\nmodel: {width: 3}\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "model", "missing required key 'type'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString("name: 'a b'\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n", "s.yaml"),
                            "not a valid run name");
  }

  TEST_CASE("base: deep merge, chains, relative paths, type change replaces the node") {
    TempDir dir;
    writeText(dir.file("common/root.yaml"), "seed: 7\nmodel: {type: small_cnn, width: 8}\ndata: {type: fashion_mnist, train_limit: 100}\n"
                                            "optimizer: {type: sgd, momentum: 0.5}\ntrain: {epochs: 3, batch_size: 32}\n");
    writeText(dir.file("common/mid.yaml"), "base: root.yaml\ntrain: {epochs: 5}\nmodel: {hidden: 16}\n");
    writeText(dir.file("exp/child.yaml"), "base: ../common/mid.yaml\nname: child\noptimizer: {type: adamw}\n");
    Spec s = loadSpec(dir.file("exp/child.yaml"));
    CHECK(s.name == "child");
    CHECK(s.seed == 7);
    CHECK(test::optionValue<std::int64_t>(s.model, "width") == 8);
    CHECK(test::optionValue<std::int64_t>(s.model, "hidden") == 16);
    CHECK(s.train.length.epochs == 5);
    CHECK(s.train.batching.batchSize == 32);
    CHECK(test::optionValue<std::int64_t>(s.data, "train_limit") == 100);
    CHECK(s.optimizer.type() == "adamw");  // sgd's momentum did not leak into adamw
    CHECK(s.files.size() == 3);
  }

  TEST_CASE("missing base file and inheritance cycles") {
    TempDir dir;
    writeText(dir.file("a.yaml"), "name: a\nbase: nowhere.yaml\n");
    CHECK_THROWS_CONTAINING(SpecError, loadSpec(dir.file("a.yaml")), "a.yaml:2:7", "base file 'nowhere.yaml' not found");
    writeText(dir.file("x.yaml"), "base: y.yaml\nname: x\n");
    writeText(dir.file("y.yaml"), "base: x.yaml\n");
    CHECK_THROWS_CONTAINING(SpecError, loadSpec(dir.file("x.yaml")), "inheritance cycle", "x.yaml -> ", "y.yaml");
    CHECK_THROWS_CONTAINING(SpecError, loadSpec(dir.file("missing.yaml")), "spec file not found");
  }

  TEST_CASE("--set overrides apply after inheritance, parsed as YAML") {
    Spec s = loadSpecFromString(kMinimal, "s.yaml",
                                {"train.epochs=4", "optimizer.lr=0.05", "scheduler.type=multistep",
                                 "scheduler.milestones=[2, 3]", "train.eval=false", "name=renamed"});
    CHECK(s.train.length.epochs == 4);
    CHECK(test::optionValue<double>(s.optimizer, "lr") == doctest::Approx(0.05));
    CHECK(test::optionValue<std::vector<std::int64_t>>(s.scheduler, "milestones") == std::vector<std::int64_t>{2, 3});
    CHECK_FALSE(s.train.evaluation.eval);
    CHECK(s.name == "renamed");
    CHECK(s.overrides.size() == 6);
  }

  TEST_CASE("malformed --set") {
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"train.epochs"}), "--set 'train.epochs'",
                            "malformed override");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"train..epochs=1"}), "malformed override");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"=1"}), "malformed override");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"name.x=1"}), "not a section");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"train.epochs=[1"}), "cannot parse value");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "s.yaml", {"train.epoch=2"}), "--set 'train.epoch=2'",
                            "did you mean 'epochs'");
  }

  TEST_CASE("the resolved YAML loads back to the same spec") {
    Spec s = loadSpecFromString(kMinimal, "s.yaml", {"scheduler.type=cosine", "optimizer.lr=0.2", "data.hflip=true"});
    Spec again = loadSpecFromString(s.toYaml(), "again.yaml");
    CHECK(again.toJson() == s.toJson());
    CHECK(s.toJson()["scheduler"]["type"] == "cosine");
    CHECK(s.toJson()["data"]["hflip"] == true);
  }

  TEST_CASE("did-you-mean") {
    CHECK(editDistance("kitten", "sitting") == 3);
    CHECK(didYouMean("epoch", {"epochs", "threads"}) == "; did you mean 'epochs'?");
    CHECK(didYouMean("zzzzzz", {"epochs", "threads"}).empty());
  }

  TEST_CASE("fixed sections are typed structs; nested sections and the comm node live in their parents") {
    Spec s = loadSpecFromString(kMinimal, "s.yaml",
                                {"train.precision=bf16", "train.device=cpu", "train.on_nonfinite=skip",
                                 "output.checkpoint.every_steps=7", "distributed.timeout_s=9",
                                 "distributed.comm.bucket_mb=3", "train.activation_checkpointing=[features]"});
    CHECK(s.train.numerics.precision == Precision::Bf16);
    CHECK(s.train.execution.device == DeviceChoice::Cpu);
    CHECK(s.train.rules.onNonFinite == NonFinitePolicy::Skip);
    CHECK(s.train.numerics.activationCheckpointing == std::vector<std::string>{"features"});
    CHECK(s.output.checkpoint.everySteps == 7);
    CHECK(s.output.checkpoint.keep == 3);
    CHECK(s.distributed.timeoutS == doctest::Approx(9.0));
    CHECK(s.distributed.comm.type() == "allreduce");
    CHECK(test::optionValue<double>(s.distributed.comm, "bucket_mb") == doctest::Approx(3.0));
    const auto j = s.toJson();
    CHECK(j["train"]["precision"] == "bf16");
    CHECK(j["output"]["checkpoint"]["every_steps"] == 7);
    CHECK(j["distributed"]["comm"]["type"] == "allreduce");
    CHECK(loadSpecFromString(s.toYaml(), "again.yaml").toJson() == j);
  }

  TEST_CASE("one table of sections: every fixed section and plugin node, in the YAML's order") {
    std::vector<std::string> paths;
    for (const auto& sec : specSections()) paths.push_back(sec.path);
    CHECK(paths == std::vector<std::string>{"model", "data", "task", "optimizer", "scheduler", "train", "train.profile",
                                            "output", "output.checkpoint", "output.mlflow", "distributed", "distributed.comm"});
    Spec s = loadSpecFromString(kMinimal, "s.yaml");
    std::vector<std::string> rowSections;
    for (const auto& r : s.rows())
      if (rowSections.empty() || rowSections.back() != r[0]) rowSections.push_back(r[0]);
    CHECK(rowSections == std::vector<std::string>{"", "model", "data", "task", "optimizer", "scheduler", "train", "train.profile",
                                                  "output", "output.checkpoint", "output.mlflow", "distributed", "distributed.comm"});
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "distributed: {comm: {bucket_mb: x}}\n", "s.yaml"),
                            "distributed.comm.bucket_mb", "expected a number");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "distributed: {backend: mpi}\n", "s.yaml"),
                            "distributed.backend", "valid: auto, gloo, nccl");
    // output.mlflow: an http(s) server without credentials in the URI, a named experiment.
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString(std::string(kMinimal) + "output: {mlflow: {tracking_uri: ftp://x}}\n", "s.yaml"),
                            "output.mlflow.tracking_uri", "not an http:// or https:// URI");
    CHECK_THROWS_CONTAINING(
        SpecError,
        loadSpecFromString(std::string(kMinimal) + "output: {mlflow: {tracking_uri: 'http://u:p@h:5000'}}\n", "s.yaml"),
        "output.mlflow.tracking_uri", "MLFLOW_TRACKING_USERNAME");
    CHECK_THROWS_CONTAINING(SpecError,
                            loadSpecFromString(std::string(kMinimal) + "output: {mlflow: {experiment: ''}}\n", "s.yaml"),
                            "output.mlflow.experiment", "must not be empty");
    CHECK(loadSpecFromString(std::string(kMinimal) + "output: {mlflow: {tracking_uri: 'https://h:5000/'}}\n", "s.yaml")
              .output.mlflow.trackingUri == "https://h:5000/");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "output: {checkpoint: {evry_steps: 1}}\n", "s.yaml"),
                            "output.checkpoint.evry_steps", "did you mean 'every_steps'");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(std::string(kMinimal) + "output: {dri: x}\n", "s.yaml"),
                            "output.dri", "section 'output' (or its section 'checkpoint', its section 'mlflow')");
  }

  TEST_CASE("setting an undeclared option is refused") {
    Spec s = loadSpecFromString(kMinimal, "s.yaml");
    s.model.set("width", std::int64_t{8});
    CHECK(test::optionValue<std::int64_t>(s.model, "width") == 8);
    CHECK_THROWS_AS(s.model.set("widht", std::int64_t{8}), std::logic_error);
    CHECK_THROWS_AS(s.model.value("nothing"), std::logic_error);
  }

  TEST_CASE("an option table: declarations with the struct's defaults, typed read, write back") {
    enum class Mode { A, B };
    struct Settings {
      std::int64_t n = 3;
      double x = 0.5;
      std::vector<std::string> names{"p"};
      Mode mode = Mode::B;
      std::optional<std::int64_t> size;  // auto
    };
    const OptionTable<Settings> table{{
        field("n", &Settings::n, "a count", {1, 9}),
        field("x", &Settings::x, "a fraction"),
        field("names", &Settings::names, "some names"),
        choice("mode", &Settings::mode, {{"a", Mode::A}, {"b", Mode::B}}, "a mode"),
        intOrAuto("size", &Settings::size, "a size or auto", {0}),
    }};
    const OptionDecls d = table.decls();
    REQUIRE(d.size() == 5);
    CHECK(std::get<std::int64_t>(*d[0].defaultValue) == 3);
    CHECK(*d[0].max == 9.0);
    CHECK(d[3].choices == std::vector<std::string>{"a", "b"});
    CHECK(std::get<std::string>(*d[3].defaultValue) == "b");
    CHECK(std::get<std::string>(*d[4].defaultValue) == "auto");
    Options o = table.write(Settings{});
    o.set("n", std::int64_t{7});
    o.set("mode", std::string("a"));
    o.set("size", std::int64_t{64});
    const Settings got = table.read(o);
    CHECK(got.n == 7);
    CHECK(got.x == 0.5);
    CHECK(got.names == std::vector<std::string>{"p"});
    CHECK(got.mode == Mode::A);
    CHECK(got.size == 64);
    CHECK(valueToString(table.write(got).value("mode")) == "a");
  }

  TEST_CASE("text that is not valid UTF-8 is refused where it is (the resolved spec is written as JSON)") {
    // Found by the fuzzer against the real catalog: a free-form string (imagefolder's root) with stray
    // bytes passed validation, then the spec's hash threw a JSON error.
    const std::string bad = std::string(kMinimal) + "output: {dir: \"res\x9e\x8d\"}\n";
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(bad, "u.yaml"), "u.yaml:4:", "output.dir: not valid UTF-8 text");
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "u.yaml", {"output.dir=\xc0\xaf"}),
                            "not valid UTF-8");  // an overlong '/'
    CHECK_THROWS_CONTAINING(SpecError, loadSpecFromString(kMinimal, "u.yaml", {"output.dir=\xed\xa0\x80"}),
                            "not valid UTF-8");  // a surrogate
    const Spec ok = loadSpecFromString(kMinimal, "u.yaml", {"output.dir=r\xc3\xa9sultats-\xf0\x9f\x93\x88"});
    CHECK(ok.output.dir == "r\xc3\xa9sultats-\xf0\x9f\x93\x88");
    CHECK_NOTHROW(ok.hash());
  }

  TEST_CASE("the resolved spec's CUDA defaults are the paths a GPU has run; the others are opt-in") {
    // What `exprun validate` prints and every result file stores: float batches copied when due,
    // the per-parameter optimizer step, libtorch's batch norm, an eager step, JPEGs decoded on the CPU.
    for (const char* optimizer : {"sgd", "adamw"}) {
      CAPTURE(optimizer);
      const Spec s = loadSpecFromString(std::string("name: d\nmodel: {type: resnet18}\ndata: {type: imagefolder, root: /x}\n"
                                                    "optimizer: {type: ") + optimizer + "}\n",
                                        "d.yaml");
      const nlohmann::json j = s.toJson();
      CHECK(j["train"]["input"] == "float");
      CHECK(j["train"]["copy_ahead"] == 0);
      CHECK(j["train"]["cuda_graph"] == false);
      CHECK(j["optimizer"]["impl"] == "per_param");
      CHECK(j["model"]["fused"] == false);
      CHECK(j["data"]["decode"] == "cpu");
    }
  }
}
