// Purpose: the checkpoint store (checksummed files, atomic commit, fallback order, pruning), the
// spec comparison, the batching of a resumption on another world size, and the safetensors export
// loaded by Python into torchvision's model. The kill-and-resume runs are in
// tests/cli/resume_test.sh and tests/cli/elastic_test.sh.
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "runner/checkpoint/Checkpoint.h"
#include "runner/checkpoint/CheckpointStore.h"
#include "runner/checkpoint/Export.h"
#include "runner/checkpoint/WorldSize.h"
#include "runner/train/Trainer.h"

#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;
namespace fs = std::filesystem;

TEST_SUITE("resume") {
  TEST_CASE("checkpoint files carry a checksum: truncation and corruption are named") {
    TempDir tmp;
    const std::string f = tmp.file("a.bin");
    const std::string content(10000, 'x');
    CheckpointStore::writeFile(f, content);
    CHECK(CheckpointStore::readFile(f) == content);
    std::string raw = readText(f);
    writeText(f, raw.substr(0, 5000));
    CHECK_THROWS_CONTAINING(CheckpointError, CheckpointStore::readFile(f), "a.bin", "truncated");
    raw[1234] = 'y';
    writeText(f, raw);
    CHECK_THROWS_CONTAINING(CheckpointError, CheckpointStore::readFile(f), "a.bin", "checksum mismatch");
    CHECK_THROWS_CONTAINING(CheckpointError, CheckpointStore::readFile(tmp.file("none.bin")), "none.bin", "missing");
  }

  TEST_CASE("commit makes a staged checkpoint the latest, keeps K, and lists fallbacks newest first") {
    TempDir tmp;
    CheckpointStore store(tmp.file("ck"));
    CHECK(store.candidates().empty());
    for (std::int64_t step : {5, 10, 15, 20}) {
      const std::string d = store.prepareStaging(step);
      CheckpointStore::writeFile(d + "/meta.json", "{}");
      store.commit(step, 3);
    }
    CHECK_FALSE(fs::exists(tmp.file("ck/step-000000005")));  // pruned: keep 3
    CHECK(readText(tmp.file("ck/latest")) == "step-000000020\n");
    auto c = store.candidates();
    REQUIRE(c.size() == 3u);
    CHECK(fs::path(c[0]).filename() == "step-000000020");
    CHECK(fs::path(c[1]).filename() == "step-000000015");
    CHECK(fs::path(c[2]).filename() == "step-000000010");
    // A staged but uncommitted checkpoint (killed before the rename) is ignored, then cleaned up.
    store.prepareStaging(25);
    CHECK(store.candidates().size() == 3u);
    writeText(tmp.file("ck/latest"), "step-000000015\n");  // killed between rename and pointer update
    CHECK(fs::path(store.candidates()[0]).filename() == "step-000000015");
    store.prepareStaging(30);
    store.commit(30, 0);
    CHECK_FALSE(fs::exists(tmp.file("ck/.staging-step-000000025")));
  }

  TEST_CASE("after falling back to an older checkpoint, new saves are kept; the same step is replaced safely") {
    TempDir tmp;
    CheckpointStore store(tmp.file("ck"));
    for (std::int64_t step : {10, 20}) {
      CheckpointStore::writeFile(store.prepareStaging(step) + "/meta.json", "{\"s\": " + std::to_string(step) + "}");
      store.commit(step, 2);
    }
    // Resumed from step 10 (step 20 damaged): the next save, step 15, must survive keep 1.
    CheckpointStore::writeFile(store.prepareStaging(15) + "/meta.json", "{}");
    store.commit(15, 1);
    CHECK(fs::exists(tmp.file("ck/step-000000015")));
    CHECK(readText(tmp.file("ck/latest")) == "step-000000015\n");
    CHECK(store.candidates().size() == 1u);
    // Saving step 15 again replaces it.
    CheckpointStore::writeFile(store.prepareStaging(15) + "/meta.json", "{\"again\": true}");
    store.commit(15, 1);
    CHECK(CheckpointStore::readFile(tmp.file("ck/step-000000015/meta.json")) == "{\"again\": true}");
    CHECK_FALSE(fs::exists(tmp.file("ck/.replaced-step-000000015")));
  }

  TEST_CASE("spec differences are listed by key path") {
    nlohmann::json a{{"optimizer", {{"lr", 0.1}, {"type", "sgd"}}}, {"train", {{"epochs", 3}}}};
    nlohmann::json b{{"optimizer", {{"lr", 0.2}, {"type", "sgd"}}}, {"train", {{"epochs", 3}, {"extra", true}}}};
    auto d = jsonDifferences(a, b);
    REQUIRE(d.size() == 2u);
    CHECK(d[0] == "optimizer.lr: checkpoint 0.1, spec 0.2");
    CHECK(d[1] == "train.extra (only in the spec)");
    CHECK(jsonDifferences(a, a).empty());
  }

  TEST_CASE("another world size: the global batch kept by the accumulation, or refused naming the sizes that keep it") {
    Spec spec = loadSpecFromString("name: w\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n"
                                   "train: {batch_size: 16, accumulate: 2}\n",
                                   "w.yaml");
    CheckpointFiles files;
    files.path = "ck/step-000000012";
    files.meta.worldSize = 2;
    files.meta.spec = spec.toJson();
    files.meta.batch = BatchShape{16, 2, 64, 16, 0.025};
    CHECK(files.shape().globalBatch == 64);
    // Written before checkpoints carried rank 0's progress and the epoch's totals: refused on another
    // world size before anything is set up; fine on its own.
    CHECK_THROWS_CONTAINING(CheckpointError, specForWorldSize(files, spec, 1, false),
                            "ck/step-000000012: written by an exprun without resumption on another number of ranks; "
                            "resume it on 2 ranks");
    CHECK(specForWorldSize(files, spec, 2, false).train.batching.accumulate == 2);
    files.meta.hasProgress = true;
    files.meta.totals = EpochTotals{};
    CHECK(specForWorldSize(files, spec, 2, false).train.batching.accumulate == 2);  // the same world size: as it is
    CHECK(specForWorldSize(files, spec, 1, false).train.batching.accumulate == 4);
    CHECK(specForWorldSize(files, spec, 4, false).train.batching.accumulate == 1);
    CHECK_THROWS_CONTAINING(CheckpointError, specForWorldSize(files, spec, 3, false),
                            "ck/step-000000012: saved by 2 ranks with global batch 64 (2 x 16 x accumulate 2); 3 ranks "
                            "x micro-batch 16 cannot keep it; world sizes that keep it: 1 (accumulate 4), 2 (accumulate "
                            "2), 4 (accumulate 1). Pass --force to go on with global batch 96");
    CHECK_THROWS_CONTAINING(CheckpointError, specForWorldSize(files, spec, 8, false), "world sizes that keep it: 1 ");
    CHECK(specForWorldSize(files, spec, 3, true).train.batching.accumulate == 2);  // --force: the spec's, global batch 96
    // A micro-batch that divides no global batch of 64: no world size can keep it.
    Spec wide = loadSpecFromString("name: w\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\ntrain: {batch_size: 24}\n",
                                   "w.yaml");
    CHECK_THROWS_CONTAINING(CheckpointError, specForWorldSize(files, wide, 1, false),
                            "no number of ranks can with this micro-batch");
    // batch_size: auto plans for train.global_batch whatever the world size.
    Spec planned = loadSpecFromString("name: w\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n"
                                      "train: {batch_size: auto, memory_budget: 1GiB, global_batch: 64}\n",
                                      "w.yaml");
    CHECK(specForWorldSize(files, planned, 3, false).train.batching.accumulate == planned.train.batching.accumulate);
    // Checkpoints older than the "batch" record: from their spec (micro-batch x accumulation x world size).
    files.meta.batch.reset();
    CHECK(files.shape().globalBatch == 64);
    CHECK(files.shape().microBatch == 16);
    CHECK(specForWorldSize(files, spec, 1, false).train.batching.accumulate == 4);
  }

  TEST_CASE("a checkpoint is never written with non-finite weights") {
    TempDir tmp;
    Spec spec = loadSpecFromString("name: nf\nmodel: {type: small_cnn, width: 4, hidden: 8}\ndata: {type: fashion_mnist}\n",
                                   "nf.yaml");
    Dist single;
    Learner learner = buildLearner(spec, DataInfo{1, 28, 28, 10}, torch::Device(torch::kCPU), single, 0.1);
    auto& model = learner.model;
    CheckpointStore store(tmp.file("ck"));
    Progress at;
    at.position.step = 7;
    const CheckpointContent run{&spec, DataInfo{1, 28, 28, 10}, &learner, torch::Device(torch::kCPU), BatchShape{}, false};
    saveCheckpoint(store, 0, single, run, at, ResultFile{});
    CHECK(store.candidates().size() == 1u);
    {
      torch::NoGradGuard g;
      model->parameters()[1].view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
    }
    at.position.step = 8;
    CHECK_THROWS_CONTAINING(CheckpointError,
                            saveCheckpoint(store, 0, single, run, at, ResultFile{}),
                            "step 8", "non-finite weights in '");
    CHECK(store.candidates().size() == 1u);  // nothing staged or committed
    CHECK_FALSE(fs::exists(tmp.file("ck/step-000000008")));
  }

  TEST_CASE("safetensors export loads into torchvision's resnet18 with strict=True and gives exprun's outputs") {
    TempDir tmp;
    Spec spec = loadSpecFromString(
        "name: exp\nseed: 2\nmodel: {type: resnet18}\n"
        "data: {type: synthetic, channels: 3, height: 32, width: 32, num_classes: 10, train_size: 32, test_size: 8}\n"
        "optimizer: {type: sgd, lr: 0.05}\n"
        "train: {epochs: 1, batch_size: 16, threads: 2, workers: 0, log_every: 0, ema_decay: 0.5, eval: false}\n"
        "output: {checkpoint: {every_steps: 2}}\n",
        "exp.yaml");
    TrainOutcome out = Trainer(spec).run(tmp.file("exp.json"));
    const std::string root = tmp.file("exp.ckpt");
    REQUIRE(fs::exists(root + "/latest"));
    exportSafetensors(root, tmp.file("raw.safetensors"), false);
    exportSafetensors(root, tmp.file("ema.safetensors"), true);
    // exprun's own output on a fixed input, in eval mode.
    torch::manual_seed(7);
    torch::Tensor x = torch::randn({4, 3, 32, 32});
    out.model->eval();
    torch::Tensor y;
    {
      torch::NoGradGuard g;
      y = out.model->forward(x);
    }
    writeSafetensors(tmp.file("io.safetensors"), {{"x", x}, {"y", y}}, {});
    const std::string py = EXPRUN_PYTHON_EXE;
    REQUIRE_MESSAGE(!py.empty(), "the venv python is not configured (EXPRUN_PYTHON)");
    const std::string script = std::string(EXPRUN_SOURCE_DIR) + "/tests/train/check_export.py";
    const std::string cmd = py + " " + script + " " + tmp.file("raw.safetensors") + " " + tmp.file("io.safetensors") +
                            " resnet18 10 > " + tmp.file("py.out") + " 2>&1";
    const int rc = std::system(cmd.c_str());
    INFO(readText(tmp.file("py.out")));
    CHECK(rc == 0);
    // The EMA export has the same keys and other values.
    const std::string cmdEma = py + " " + script + " " + tmp.file("ema.safetensors") + " " + tmp.file("io.safetensors") +
                               " resnet18 10 > " + tmp.file("py2.out") + " 2>&1";
    CHECK(std::system(cmdEma.c_str()) != 0);  // loads strictly (no exception exit 1 vs 2 distinction needed) but differs
    CHECK(readText(tmp.file("py2.out")).find("max |torchvision - exprun|") != std::string::npos);
    CHECK_THROWS_CONTAINING(CheckpointError, exportSafetensors(tmp.file("nothing"), tmp.file("x.st"), false), "nothing");
  }
}
