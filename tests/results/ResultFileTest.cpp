// Purpose: the result file as a typed struct (runner/results/ResultFile.h): every field written is
// read back as it was (NaN as null included); the summary derives from the records (the time to
// target from the first evaluation meeting it); a file of an older exprun, without the fields
// added since schema 1 began, reads with their defaults; a bad field is named by its path.
#include <cmath>
#include <limits>

#include "runner/results/ResultFile.h"
#include "tests/TestUtil.h"

using namespace exprun;
using nlohmann::json;

namespace {

ResultFile fullResult() {
  ResultFile r;
  r.name = "full";
  r.status = "interrupted";
  r.spec = {{"name", "full"}};
  r.provenance = {{"world_size", 2}, {"global_batch", 256}};
  EpochRecord e;
  e.epoch = 1;
  e.timeS = 12.5;
  e.imagesPerS = 480;
  e.trainLoss = std::numeric_limits<double>::quiet_NaN();  // a diverged run's loss: null in the file
  e.valTop1 = 61.25;
  e.valTop1Ema = 60.5;
  e.peakMemoryBytes = 1 << 20;
  e.peakAllocatedBytes = 1 << 19;
  e.peakMemoryPerRank = {1 << 20, 1 << 19};
  e.evalPeakMemoryBytes = 1 << 21;
  e.evalPeakAllocatedBytes = 1 << 20;
  e.partial = true;
  e.mfu = 0.25;
  r.epochs.push_back(e);
  r.evals.push_back(EvalRecord{5, 1, 10.0, 0.9, 55.0, 90.0});
  r.evals.push_back(EvalRecord{10, 1, 20.0, 0.7, 62.0, 95.0});
  WorldSizeChange c;
  c.step = 10;
  c.epoch = 1;
  c.sample = 640;
  c.fromWorld = 2;
  c.toWorld = 1;
  c.from = BatchShape{64, 1, 128, 10, 0.05};
  c.to = BatchShape{64, 2, 128, 10, 0.05};
  c.checkpoint = "ck/step-000000010";
  r.worldSizeChanges.push_back(c);
  r.target = Target{60.0, 0, 0};
  r.compression.push_back(CompressedModel{"fp32", 100, 2e6, 400, 61.0, 50, 500});
  r.methods = {{"prune", {{"steps", json::array()}, {"flops_removed_pct", 50.0}}}};
  return r;
}

}  // namespace

TEST_SUITE("result_file") {
  TEST_CASE("every field written reads back as it was") {
    const ResultFile r = fullResult();
    const json j = r;
    CHECK(j.dump().find("\"train_loss\":null") != std::string::npos);  // JSON has no NaN
    CHECK(j["summary"]["time_to_target_s"] == 20.0);  // the second evaluation meets 60 %
    CHECK(j["summary"]["target_step"] == 10);
    CHECK(j["summary"]["epochs_completed"] == 0);  // the only epoch is partial
    const ResultFile back = resultFileFromText(j.dump(), "r.json");
    CHECK(json(back).dump() == j.dump());
    CHECK(std::isnan(back.epochs[0].trainLoss));
    CHECK(back.epochs[0].valTop1Ema == 60.5);
    CHECK(j["epochs"][0]["eval_peak_allocated_bytes"] == 1 << 20);
    CHECK(back.epochs[0].evalPeakMemoryBytes == 1 << 21);
    CHECK(back.worldSizeChanges[0].to.accumulate == 2);
    CHECK(back.target.top1 == 60.0);
    CHECK(back.compression[0].imagesPerSB64 == 500);
    CHECK(back.methods["prune"]["flops_removed_pct"] == 50.0);
  }

  TEST_CASE("a file of an older exprun reads with the later fields' defaults") {
    const json old = json::parse(R"({"schema": 1, "name": "old", "status": "completed", "provenance": {},
      "epochs": [{"epoch": 1, "time_s": 3.0, "images_per_s": 10.0, "data_wait_s": 0.0, "train_loss": 1.0,
                  "train_top1": 50.0, "val_loss": 1.0, "val_top1": 40.0, "val_top5": 90.0, "lr": 0.1,
                  "peak_memory_bytes": 100}]})");
    const ResultFile r = resultFileFromText(old.dump(), "old.json");
    REQUIRE(r.epochs.size() == 1u);
    CHECK(r.epochs[0].peakAllocatedBytes == -1);
    CHECK(r.epochs[0].evalPeakAllocatedBytes == -1);
    CHECK(r.epochs[0].lossScale == 1.0);
    CHECK(r.evals.empty());
    CHECK_FALSE(r.target.any());
    CHECK(r.summary().meanEpochTimeS == 3.0);
  }

  TEST_CASE("a bad field is named by its path and the file") {
    json j = fullResult();
    j["world_size_changes"][0]["from"].erase("world_size");
    CHECK_THROWS_CONTAINING(JsonFieldError, resultFileFromText(j.dump(), "bad.json"),
                            "bad.json: world_size_changes[0].from.world_size: missing required field");
    j = fullResult();
    j["summary"]["target"]["val_top1"] = "high";
    CHECK_THROWS_CONTAINING(JsonFieldError, resultFileFromText(j.dump(), "bad.json"),
                            "summary.target.val_top1: expected a number");
    CHECK_THROWS_CONTAINING(JsonFieldError, readResultFile("/nonexistent/r.json"), "cannot read result file");
  }

  TEST_CASE("an MFU above 100 % is written as null with its note, read back above 1, shown as no figure") {
    ResultFile r = fullResult();
    r.epochs[0].mfu = 3.8;
    const json j = r;
    CHECK(j["epochs"][0]["mfu"].is_null());
    CHECK(j["epochs"][0]["mfu_note"] == "> 100 % (peak unknown)");
    const ResultFile back = resultFileFromText(j.dump(), "r.json");
    CHECK(back.epochs[0].mfu > 1);
    CHECK(formatMfu(back.epochs[0].mfu) == "> 100 % (peak unknown)");
    CHECK(formatMfu(0.25) == "25.0 %");
    CHECK(formatMfu(0) == "—");
    CHECK(formatMfu(1.04) == kMfuAbovePeak);
  }
}
