// Purpose: a checkpoint's meta.json as a typed struct (runner/checkpoint/Meta.h): written and read
// back whole; a checkpoint of an older exprun (no progress, no epoch totals, no batching record)
// reads with what it has and its batching from its stored spec; another format is refused.
#include "runner/checkpoint/CheckpointStore.h"
#include "runner/checkpoint/Meta.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

using namespace exprun;
using nlohmann::json;

TEST_SUITE("checkpoint_meta") {
  TEST_CASE("meta.json is written and read back whole") {
    const Spec spec = loadSpecFromString("name: m\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n", "m.yaml");
    CheckpointMeta m;
    m.name = "m";
    m.worldSize = 2;
    m.progress.position.step = 12;
    m.progress.position.epoch = 2;
    m.progress.position.sample = 768;
    m.progress.meters.lossSum = 3.5;
    m.hasProgress = true;
    m.totals = EpochTotals{7.0, 600, 768, 1, 4.5, 0.25, 0.5, 1e6};
    m.spec = spec.toJson();
    m.specYaml = spec.toYaml();
    m.specHash = spec.hash();
    m.model = "small_cnn";
    m.ema = true;
    m.data = DataInfo{1, 28, 28, 10};
    EpochRecord e;
    e.epoch = 1;
    e.valTop1 = 80.0;
    m.history.epochs.push_back(e);
    m.history.evals.push_back(EvalRecord{6, 1, 2.0, 0.5, 80.0, 99.0});
    Attempt a;
    a.number = 1;
    a.toStep = 12;
    m.history.attempts.push_back(a);
    m.history.mlflowRunId = "abc";
    m.batch = BatchShape{64, 3, 384, 10, 0.15};
    m.methods = {{"prune", {{"widths", {{"conv1", 8}}}}}};
    const json j = m;
    CHECK(j["format"] == "exprun-checkpoint-1");
    CHECK(j["step"] == 12);  // rank 0's position, also at the top for other tools
    const CheckpointMeta back = j.get<CheckpointMeta>();
    CHECK(json(back) == j);
    CHECK(back.shape("ck").globalBatch == 384);
    CHECK(back.totals->commBytes == 1e6);
    CHECK(back.data->numClasses == 10);
    CHECK(back.methods["prune"]["widths"]["conv1"] == 8);
    // The history is the result file's table under one key: a field added there reaches checkpoints.
    CHECK(j["history"] == runHistoryTable().write(m.history));
    CHECK(j["history"]["epochs"][0]["val_top1"] == 80.0);
    CHECK(back.history.attempts.at(0).toStep == 12);
    CHECK(back.history.mlflowRunId == "abc");
    CHECK_FALSE(j.contains("result_epochs"));
  }

  TEST_CASE("an older checkpoint reads with what it has; its batching comes from its spec") {
    const Spec spec = loadSpecFromString("name: m\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n"
                                         "train: {batch_size: 16, accumulate: 2}\n",
                                         "m.yaml");
    const json old{{"format", "exprun-checkpoint-1"}, {"world_size", 2}, {"step", 5}, {"epoch", 1},
                   {"micro", 10}, {"spec", spec.toJson()}, {"result_epochs", json::array()}};
    const CheckpointMeta m = old.get<CheckpointMeta>();
    CHECK_FALSE(m.hasProgress);
    CHECK_FALSE(m.totals.has_value());
    CHECK(m.progress.position.micro == 10);
    CHECK(m.progress.position.sample == -1);  // derived on restore
    CHECK(m.shape("ck").globalBatch == 16 * 2 * 2);
    // A checkpoint from before the history had its key (as tests/fixtures/checkpoint-2026-12-04):
    // its records at the top.
    json flat = old;
    EpochRecord e;
    e.epoch = 1;
    e.trainLoss = 2.5;
    flat["result_epochs"] = json::array({json(e)});
    flat["result_evals"] = json::array({json(EvalRecord{4, 1, 1.5, 0.7, 55.0, 90.0})});
    Attempt a;
    a.number = 1;
    a.toStep = 4;
    flat["attempts"] = json::array({attemptTable().write(a)});
    flat["mlflow_run_id"] = "r1";
    flat["mlflow_run_key"] = "k1";
    const CheckpointMeta legacy = flat.get<CheckpointMeta>();
    REQUIRE(legacy.history.epochs.size() == 1);
    CHECK(legacy.history.epochs[0].trainLoss == 2.5);
    CHECK(legacy.history.evals.at(0).valTop1 == 55.0);
    CHECK(legacy.history.attempts.at(0).toStep == 4);
    CHECK(legacy.history.mlflowRunId == "r1");
    CHECK(legacy.history.mlflowRunKey == "k1");
    CHECK_THROWS_CONTAINING(CheckpointError, json({{"format", "something-else"}, {"world_size", 1}}).get<CheckpointMeta>(),
                            "not an exprun checkpoint");
  }
}
