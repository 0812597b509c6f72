// Purpose: the files the live outputs append to — TFRecord framing with CRC-32C (the standard check
// value, TensorBoard's masking), append-only files cut back to the size a checkpoint recorded, and
// the per-step CSV, which also drops the rows a resumed epoch counts anew.
#include <cstring>
#include <filesystem>

#include "runner/live/AppendFile.h"
#include "runner/live/EventFile.h"
#include "runner/live/Sinks.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

TEST_SUITE("event_file") {
  TEST_CASE("CRC-32C: the standard check value, and TFRecord's masking") {
    CHECK(crc32c("123456789", 9) == 0xE3069283u);
    const std::uint32_t c = crc32c("", 0);
    CHECK(maskedCrc32c("", 0) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
  }

  TEST_CASE("a TFRecord: length, its masked CRC, the payload, its masked CRC") {
    const std::string payload = eventProto(1.5, 7, {{"train/loss", 0.25f}});
    const std::string r = tfRecord(payload);
    REQUIRE(r.size() == 8 + 4 + payload.size() + 4);
    std::uint64_t length;
    std::uint32_t lengthCrc, payloadCrc;
    std::memcpy(&length, r.data(), 8);
    std::memcpy(&lengthCrc, r.data() + 8, 4);
    std::memcpy(&payloadCrc, r.data() + 12 + payload.size(), 4);
    CHECK(length == payload.size());
    CHECK(lengthCrc == maskedCrc32c(r.data(), 8));
    CHECK(r.substr(12, payload.size()) == payload);
    CHECK(payloadCrc == maskedCrc32c(payload.data(), payload.size()));
  }

  TEST_CASE("an append-only file: a header when new, whole flushes, cut back on resume") {
    TempDir dir;
    const std::string path = dir.file("sub/a.csv");
    {
      AppendFile f(path, -1, "h\n");
      f.add("1\n");
      CHECK(readText(path).empty());  // nothing written before the flush
      f.flush();
      CHECK(f.bytes() == 4);
      f.add("2\n");
      f.flush();
    }
    CHECK(readText(path) == "h\n1\n2\n");
    {
      AppendFile resumed(path, 4, "h\n");  // the checkpoint recorded 4 bytes: row 2 goes
      CHECK(resumed.bytes() == 4);
      resumed.add("2b\n");
      resumed.flush();
    }
    CHECK(readText(path) == "h\n1\n2b\n");
    AppendFile fresh(path, -1, "h\n");  // a new run starts the file again
    fresh.flush();
    CHECK(readText(path) == "h\n");
  }

  TEST_CASE("the per-step CSV drops the rows a resumed epoch counts anew (another global batch)") {
    TempDir dir;
    const std::string path = dir.file("r.steps.csv");
    const std::string header = "step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s\n";
    writeText(path, header + "1,1,x\n2,1,x\n3,2,x\n4,2,x\n");
    const auto all = static_cast<std::int64_t>(std::filesystem::file_size(path));
    {
      StepsCsv csv(path, all, 3, 2);  // resumed at step 3 of epoch 2: step 4 goes
      CHECK(csv.bytes() == all - 6);
    }
    CHECK(readText(path) == header + "1,1,x\n2,1,x\n3,2,x\n");
    StepRecord r;
    r.step = 4;
    r.epoch = 2;
    r.loss = 0.5;
    StepsCsv again(path, -1, 0, 1);
    again.step(r);
    again.flush();
    CHECK(readText(path).rfind(header + "4,2,0.5,", 0) == 0);
  }
}
