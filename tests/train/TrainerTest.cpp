// Purpose: real (short) training runs: learning well above chance on a Fashion-MNIST subset,
// the result file's fields, determinism, max_steps, and the run command's refusals.
#include <thread>

#include "runner/cli/Commands.h"
#include "runner/metrics/Hardware.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/Spec.h"
#include "runner/train/Evaluate.h"
#include "runner/train/Trainer.h"

#include "tests/HostReads.h"
#include "tests/TestUtil.h"
#include "tests/TrainUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {
const char* kTrainerSpec = R"(name: tiny
seed: 3
model: {type: small_cnn, width: 8, hidden: 32}
data: {type: fashion_mnist, train_limit: 4000, test_limit: 1000}
optimizer: {type: sgd, lr: 0.2, base_batch: 256}
scheduler: {type: cosine, warmup_steps: 10}
train: {epochs: 2, batch_size: 64, threads: 1, workers: 1, log_every: 0}
)";
}  // namespace

TEST_SUITE("trainer") {
  TEST_CASE("a short real run learns far above chance and writes a complete result file") {
    TempDir dir;
    Spec spec = loadSpecFromString(kTrainerSpec, "tiny.yaml");
    const std::string path = dir.file("out/tiny.json");
    TrainOutcome out = Trainer(spec).run(path);
    CHECK_FALSE(out.interrupted);
    auto j = nlohmann::json::parse(readText(path));
    CHECK(j == out.result);
    CHECK(j["schema"] == 1);
    CHECK(j["name"] == "tiny");
    CHECK(j["status"] == "completed");
    CHECK(j["spec"]["model"]["width"] == 8);
    CHECK(j["spec"]["optimizer"]["scale_lr"] == "linear");
    for (const char* k : {"exprun_version", "git_commit", "libtorch_version", "compiler", "host", "cpu_model", "cores",
                          "threads", "device", "world_size", "start_time"})
      CHECK_MESSAGE(j["provenance"].contains(k), k);
    CHECK(j["provenance"]["libtorch_version"].get<std::string>().rfind("2.", 0) == 0);
    CHECK(j["provenance"]["threads"] == 1);
    // MFU's denominator by rule where one fits this CPU (x86 with SSE2 or better), named; never above 100 %.
    const CpuInfo& cpu = thisCpu();
    if (cpuPeak(cpu, Precision::Fp32, 1).flopsPerS > 0) {
      CHECK(j["provenance"]["peak_flops_per_s"].get<double>() == doctest::Approx(cpuPeak(cpu, Precision::Fp32, 1).flopsPerS));
      CHECK(j["provenance"]["peak_flops_source"].get<std::string>().find("FLOP/cycle") != std::string::npos);
    }
    CHECK(j["provenance"]["precision_native"] == true);  // fp32
    CHECK(j["provenance"]["device_features"].is_array());
    REQUIRE(j["epochs"].size() == 2);
    for (const auto& e : j["epochs"]) {
      for (const char* k : {"epoch", "time_s", "images_per_s", "data_wait_s", "train_loss", "train_top1", "val_loss",
                            "val_top1", "val_top5", "lr", "peak_memory_bytes"})
        CHECK_MESSAGE(e.contains(k), k);
      CHECK(e["time_s"].get<double>() > 0);
      CHECK(e["peak_memory_bytes"].get<std::int64_t>() > 10'000'000);
      CHECK(e["samples"] == 4000);
      CHECK(e["mfu"].get<double>() > 0);
      CHECK(e["mfu"].get<double>() <= 1);
    }
    // Chance is 10 %; 4,000 images for two epochs reach well over 65 %.
    CHECK(j["epochs"][1]["val_top1"].get<double>() > 65.0);
    CHECK(j["epochs"][1]["val_top5"].get<double>() > 95.0);
    CHECK(j["epochs"][1]["train_loss"].get<double>() < j["epochs"][0]["train_loss"].get<double>());
    CHECK(j["summary"]["best_val_top1"].get<double>() >= j["summary"]["final_val_top1"].get<double>());
    CHECK(j["summary"]["epochs_completed"] == 2);
    // The cosine schedule with the linear rule: lr 0.2 per 256 → 0.05 for batch 64, decayed at the end.
    CHECK(j["epochs"][1]["lr"].get<double>() < 0.05 * 0.05);
  }

  TEST_CASE("same seed, same losses; another seed, other losses") {
    auto run = [](const std::vector<std::string>& sets) {
      Spec spec = loadSpecFromString(kTrainerSpec, "tiny.yaml", sets);
      return Trainer(spec).run("").result;
    };
    std::vector<std::string> quick{"data.train_limit=1000", "data.test_limit=200", "train.epochs=1"};
    auto a = run(quick), b = run(quick);
    auto other = quick;
    other.push_back("seed=4");
    auto c = run(other);
    CHECK(a["epochs"][0]["train_loss"] == b["epochs"][0]["train_loss"]);
    CHECK(a["epochs"][0]["val_loss"] == b["epochs"][0]["val_loss"]);
    CHECK(a["epochs"][0]["train_loss"] != c["epochs"][0]["train_loss"]);
    // worker threads do not change the numbers
    auto w = quick;
    w.push_back("train.workers=3");
    CHECK(run(w)["epochs"][0]["train_loss"] == a["epochs"][0]["train_loss"]);
  }

  TEST_CASE("max_steps stops early") {
    Spec spec = loadSpecFromString(kTrainerSpec, "tiny.yaml", {"train.max_steps=5", "train.eval=false"});
    auto j = Trainer(spec).run("").result;
    REQUIRE(j["epochs"].size() == 1);
    CHECK(j["epochs"][0]["steps"] == 5);
    CHECK(j["epochs"][0]["samples"] == 5 * 64);
  }

  TEST_CASE("the training steps' peak memory and the evaluations' are kept apart") {
    // Evaluation batches of 1,000 against training micro-batches of 16: the evaluation's tensors
    // peak far higher, and that must not show as the training step's figure.
    Spec spec = loadSpecFromString(kTrainerSpec, "tiny.yaml",
                                   {"train.epochs=1", "train.max_steps=8", "train.batch_size=16", "train.eval_batch_size=1000"});
    auto j = Trainer(spec).run("").result;
    const auto& e = j["epochs"][0];
    REQUIRE(e.contains("eval_peak_allocated_bytes"));
    REQUIRE(e.contains("eval_peak_memory_bytes"));
    CHECK(e["eval_peak_allocated_bytes"].get<std::int64_t>() > 2 * e["peak_allocated_bytes"].get<std::int64_t>());
    CHECK(e["peak_allocated_bytes"].get<std::int64_t>() > 0);
    Spec noEval = loadSpecFromString(kTrainerSpec, "tiny.yaml", {"train.epochs=1", "train.max_steps=8", "train.eval=false"});
    const auto quiet = Trainer(noEval).run("").result["epochs"][0];
    CHECK_FALSE(quiet.contains("eval_peak_allocated_bytes"));
    CHECK_FALSE(quiet.contains("eval_peak_memory_bytes"));
  }

  TEST_CASE("a stop request ends the run with the completed epochs only") {
    Spec spec = loadSpecFromString(kTrainerSpec, "tiny.yaml", {"train.eval=false"});
    stopRequested().store(true);
    auto out = Trainer(spec).run("");
    stopRequested().store(false);
    CHECK(out.interrupted);
    CHECK(out.result["status"] == "interrupted");
    CHECK(out.result["epochs"].empty());
  }

  TEST_CASE("run refuses to replace a result file without --overwrite, and bad specs, with exit 2") {
    TempDir dir;
    writeText(dir.file("spec.yaml"), kTrainerSpec);
    writeText(dir.file("res/tiny.json"), "{\"keep\": true}");
    RunArgs args;
    args.spec = dir.file("spec.yaml");
    args.outDir = dir.file("res");
    CHECK(cmdRun(args) == kExitBadInput);
    CHECK(readText(dir.file("res/tiny.json")) == "{\"keep\": true}");
    args.sets = {"train.epochs=zero"};
    args.overwrite = true;
    CHECK(cmdRun(args) == kExitBadInput);
    CHECK(readText(dir.file("res/tiny.json")) == "{\"keep\": true}");
    args.sets = {"data.root=" + dir.file("nowhere")};
    CHECK(cmdRun(args) == kExitBadInput);
    CHECK(readText(dir.file("res/tiny.json")) == "{\"keep\": true}");
    CHECK(cmdValidate(dir.file("spec.yaml"), {}) == kExitOk);
    CHECK(cmdValidate(dir.file("spec.yaml"), {"model.type=resnet"}) == kExitBadInput);
    CHECK(cmdPlugins("model") == kExitOk);
    CHECK(cmdPlugins("modle") == kExitBadInput);
  }

  TEST_CASE("the host-read counter counts .item() on this thread only") {
    const test::HostReads reads;
    const torch::Tensor t = torch::ones({2});
    CHECK(t.sum().item<double>() == 2.0);
    std::thread([&] { (void)t.sum().item<double>(); }).join();
    CHECK(reads.seen() == 1);
  }

  TEST_CASE("evaluation reads its sums on the host once, not once per batch") {
    auto readsWhenEvaluating = [](int images) {
      Spec spec = loadSpecFromString(test::kSmallRunSpec, "p.yaml",
                                     {"data.root=" + test::kFashionMnistRoot, "data.test_limit=" + std::to_string(images),
                                      "train.eval_batch_size=32", "train.workers=0"});
      Dist single;
      TrainSetup s = setUp(spec, single);
      const test::HostReads reads;
      const EvalResult r = evaluate(s, single);
      CHECK(r.top1 >= 0.0);
      return reads.seen();
    };
    const int two = readsWhenEvaluating(64), eight = readsWhenEvaluating(256);  // 2 and 8 batches
    CHECK(two == eight);
    CHECK(two >= 1);  // the counter sees the reads at the end (the loss sum and the two top-k counts)
    CHECK(two <= 3);
  }
}
