// Purpose: a projection of a spec's memory per device and epoch time on CUDA devices this machine does
// not have — labelled as a projection everywhere it is shown. Memory: the estimate of
// MemoryEstimate.h at the spec's micro-batch. Time: the training FLOPs per image counted from the
// model's real operators (metrics/Flops.h), the device's published peak for the precision, and an
// efficiency (achieved FLOP/s / peak) calibrated on NVIDIA's published PyTorch ResNet-50 v1.5
// training throughput on another device, plus a ring-allreduce term for the gradient bytes over the
// link's bandwidth, not overlapped with compute. Each figure used is in the tables of
// Projection.cpp with its source, and printed with the result.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runner/metrics/Hardware.h"
#include "runner/plan/MemoryEstimate.h"
#include "runner/spec/Spec.h"

namespace exprun {

// One published training throughput of ResNet-50 v1.5 at 224² on one device.
struct Calibration {
  std::string device;   // a knownDevices() name
  Precision precision = Precision::Fp32;
  std::int64_t batch = 0;
  double imagesPerS = 0;
  std::string source;
};
const std::vector<Calibration>& calibrations();

// Where the default link bandwidth comes from.
extern const char* const kLinkSource;

struct ProjectionOptions {
  std::string device = "rtx3090";
  std::vector<std::string> calibrateOn{"v100-sxm2-16gb", "a100-sxm4-80gb"};
  std::int64_t imagesPerEpoch = 1281167;  // ILSVRC-2012 training set
  double linkBytesPerS = 25.8e9;          // allreduce bus bandwidth between the devices
  std::vector<std::int64_t> probeBatches{8, 16, 32};
  DeviceAllowance allowance;
};

struct ProjectedRun {
  std::string name;
  int gpus = 1;
  std::string precision;
  std::int64_t microBatch = 0, accumulate = 1, globalBatch = 0;
  StepMemory memory;                    // estimated allocated bytes per device at the micro-batch
  std::int64_t deviceBytes = 0;           // with the allowance
  bool fits = false;                    // deviceBytes <= the device's memory
  double flopsPerImage = 0;             // counted, forward + backward
  double gradientBytes = 0;             // reduced per optimizer step (0 for one device)
  double allreduceSPerStep = 0;
  struct Timing {
    std::string calibratedOn;
    double efficiency = 0;      // calibration's achieved FLOP/s / its device's peak
    double imagesPerSPerDevice = 0;
    double epochS = 0;          // compute + allreduce
  };
  std::vector<Timing> timings;  // one per calibration
  nlohmann::json toJson() const;
};

struct Projection {
  ProjectionOptions options;
  DeviceFigures device;
  double calibrationFlopsPerImage = 0;  // ResNet-50 v1.5 at 224², counted
  std::vector<ProjectedRun> runs;
  nlohmann::json toJson() const;
  std::string markdown() const;  // the table, then every assumption and source
};

// Projects each spec on options.device × its number of GPUs (gpus[i]).
Projection project(const std::vector<Spec>& specs, const std::vector<int>& gpus, const ProjectionOptions& options);

}  // namespace exprun
