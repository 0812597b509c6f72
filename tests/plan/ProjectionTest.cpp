// Purpose: the projection's arithmetic from its stated inputs: the peak by precision, the
// efficiency calibrated on a published throughput, images/s per device, the ring-allreduce term and
// the epoch; memory from the step's measured estimate; bad inputs named.
#include "runner/plan/Projection.h"
#include "runner/spec/Spec.h"
#include "runner/step/Learner.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
Spec smallSpec(const std::string& precision, int batch, int accumulate) {
  return loadSpecFromString("name: small-" + precision +
                                "\nseed: 1\nmodel: {type: small_cnn, width: 8, hidden: 32}\n"
                                "data: {type: synthetic, channels: 1, height: 28, width: 28, num_classes: 10}\n"
                                "train: {epochs: 1, batch_size: " +
                                std::to_string(batch) + ", accumulate: " + std::to_string(accumulate) +
                                ", precision: " + precision + "}\n",
                            "small.yaml");
}
}  // namespace

TEST_SUITE("projection") {
  TEST_CASE("published figures: peaks by precision, unknown names listed") {
    const DeviceFigures& rtx = deviceNamed("rtx3090");
    CHECK(rtx.memoryBytes == 24LL << 30);
    CHECK(peakFor(rtx, Precision::Fp32) == doctest::Approx(35.6e12));
    CHECK(peakFor(rtx, Precision::Fp16) == doctest::Approx(71e12));
    CHECK(peakFor(rtx, Precision::Bf16) == doctest::Approx(71e12));
    CHECK(peakFor(deviceNamed("a100-sxm4-80gb"), Precision::Fp32) == doctest::Approx(156e12));  // TF32
    CHECK(peakFor(deviceNamed("v100-sxm2-16gb"), Precision::Fp32) == doctest::Approx(15.7e12));  // no TF32
    CHECK_THROWS_CONTAINING(std::invalid_argument, deviceNamed("rtx5090"), "unknown device 'rtx5090'", "rtx3090");
    for (const auto& c : calibrations()) CHECK_NOTHROW(deviceNamed(c.device));
  }

  TEST_CASE("epoch time = images / (efficiency × peak / FLOPs × devices) + steps × ring allreduce") {
    ProjectionOptions o;
    o.imagesPerEpoch = 100000;
    o.linkBytesPerS = 10e9;
    o.probeBatches = {8, 16, 32};
    const std::vector<Spec> specs{smallSpec("fp32", 64, 1), smallSpec("fp16", 32, 2)};
    const Projection p = project(specs, {1, 4}, o);
    REQUIRE(p.runs.size() == 2);
    CHECK(p.calibrationFlopsPerImage == doctest::Approx(3 * 8.18e9).epsilon(0.05));  // resnet50 at 224²

    const ProjectedRun& one = p.runs[0];
    CHECK(one.globalBatch == 64);
    CHECK(one.allreduceSPerStep == 0);
    REQUIRE(one.timings.size() == 2);
    const auto& v100 = one.timings[0];
    CHECK(v100.calibratedOn == "v100-sxm2-16gb");
    CHECK(v100.efficiency == doctest::Approx(367 * p.calibrationFlopsPerImage / 15.7e12));
    CHECK(v100.imagesPerSPerDevice == doctest::Approx(v100.efficiency * 35.6e12 / one.flopsPerImage));
    CHECK(v100.epochS == doctest::Approx(100000 / v100.imagesPerSPerDevice));
    CHECK(one.timings[1].efficiency == doctest::Approx(938 * p.calibrationFlopsPerImage / 156e12));

    const ProjectedRun& four = p.runs[1];
    CHECK(four.globalBatch == 32 * 2 * 4);
    CHECK(four.precision == "fp16");
    const double params = 4.0 * countParameters(*buildModel(specs[1]));
    CHECK(four.gradientBytes == doctest::Approx(params));
    CHECK(four.allreduceSPerStep == doctest::Approx(2.0 * 3 / 4 * params / 10e9));
    const auto& a100 = four.timings[1];
    CHECK(a100.efficiency == doctest::Approx(2470 * p.calibrationFlopsPerImage / 312e12));
    CHECK(a100.epochS ==
          doctest::Approx(100000 / (a100.imagesPerSPerDevice * 4) + 100000.0 / 256 * four.allreduceSPerStep));
    // Memory: the estimate at the spec's micro-batch, with the allowance.
    CHECK(four.memory.batch == 32);
    const auto data = build<DataKind>(specs[1].data);
    const DeviceExtras extras = deviceExtras(specs[1], data.get(), 32, four.memory.activations());
    CHECK(extras.total() > 0);  // the synthetic pool and the batches copied ahead
    CHECK(four.deviceBytes == deviceBytes(four.memory.peak + extras.total(), o.allowance));

    const std::string md = p.markdown();
    CHECK(md.find("Projection (not a measurement)") != std::string::npos);
    CHECK(md.find("| small-fp16 | 4 | 32 × 2 | fp16 |") != std::string::npos);
    CHECK(md.find("DeepLearningExamples") != std::string::npos);
    CHECK(p.toJson()["runs"][1]["timings"][1]["epoch_s"].get<double>() == doctest::Approx(a100.epochS));
  }

  TEST_CASE("bad inputs are named") {
    ProjectionOptions o;
    const std::vector<Spec> specs{smallSpec("fp32", 8, 1)};
    CHECK_THROWS_CONTAINING(std::invalid_argument, project(specs, {1, 2}, o), "one --gpus count per spec");
    o.device = "h100";
    CHECK_THROWS_CONTAINING(std::invalid_argument, project(specs, {1}, o), "unknown device 'h100'");
    o.device = "rtx3090";
    o.calibrateOn = {"rtx3090"};
    Spec autoBatch = specs[0];
    autoBatch.train.batching.batchSize.reset();
    CHECK_THROWS_CONTAINING(std::invalid_argument, project({autoBatch}, {1}, o), "batch_size is auto");
    CHECK_THROWS_CONTAINING(std::invalid_argument, project(specs, {1}, o),
                            "no published ResNet-50 throughput for --calibrate 'rtx3090'");
  }
}
