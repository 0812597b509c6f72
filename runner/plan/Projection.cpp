// Purpose: projected memory per device and epoch time on CUDA devices (see Projection.h). The
// published throughputs it calibrates on are below, each with its source (the devices' peaks:
// metrics/Hardware.cpp).
#include "runner/plan/Projection.h"

#include <algorithm>
#include <cmath>

#include "runner/step/Learner.h"
#include "runner/util/Log.h"

namespace exprun {

namespace {
constexpr double kT = 1e12;
const char* kDle =
    "NVIDIA/DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md at commit 7bdfc81d "
    "(\"Training performance\", 1 GPU, pytorch-21.03 NGC container, DALI data loading)";
}  // namespace

const char* const kLinkSource =
    "25.8 GB/s: nccl-tests all_reduce bus bandwidth of 25.7-25.95 GB/s at 256 MB-1 GB on 4 x RTX 4090 on PCIe 4.0 "
    "x16 with a peer-to-peer-enabled driver (github.com/tinygrad/open-gpu-kernel-modules, issue 36), the nearest "
    "published figure for four consumer devices on PCIe 4.0; without peer-to-peer (driver-dependent on GeForce devices) "
    "NCCL goes through host memory and is slower";

const std::vector<Calibration>& calibrations() {
  static const std::vector<Calibration> all{
      {"v100-sxm2-16gb", Precision::Fp32, 112, 367, std::string(kDle) + ": DGX-1 V100 16GB, FP32, batch 112: 367 img/s"},
      {"v100-sxm2-16gb", Precision::Fp16, 256, 1200,
       std::string(kDle) + ": DGX-1 V100 16GB, AMP (NHWC), batch 256: 1200 img/s"},
      {"a100-sxm4-80gb", Precision::Fp32, 256, 938, std::string(kDle) + ": DGX A100 80GB, TF32, batch 256: 938 img/s"},
      {"a100-sxm4-80gb", Precision::Fp16, 256, 2470,
       std::string(kDle) + ": DGX A100 80GB, AMP (NHWC), batch 256: 2470 img/s"},
  };
  return all;
}

namespace {

const Calibration& calibrationFor(const std::string& device, Precision precision) {
  const Precision wanted = precision == Precision::Fp32 ? Precision::Fp32 : Precision::Fp16;
  for (const auto& c : calibrations())
    if (c.device == device && c.precision == wanted) return c;
  throw std::invalid_argument("no published ResNet-50 throughput for --calibrate '" + device + "' in " +
                              precisionName(wanted));
}

}  // namespace

nlohmann::json ProjectedRun::toJson() const {
  nlohmann::json t = nlohmann::json::array();
  for (const auto& x : timings)
    t.push_back({{"calibrated_on", x.calibratedOn},
                 {"efficiency", x.efficiency},
                 {"images_per_s_per_device", x.imagesPerSPerDevice},
                 {"epoch_s", x.epochS}});
  return nlohmann::json{{"name", name},
                        {"gpus", gpus},
                        {"precision", precision},
                        {"micro_batch", microBatch},
                        {"accumulate", accumulate},
                        {"global_batch", globalBatch},
                        {"memory", memory.toJson()},
                        {"device_bytes", deviceBytes},
                        {"fits", fits},
                        {"flops_per_image", flopsPerImage},
                        {"gradient_bytes_per_step", gradientBytes},
                        {"allreduce_s_per_step", allreduceSPerStep},
                        {"timings", t}};
}

nlohmann::json Projection::toJson() const {
  nlohmann::json runsJson = nlohmann::json::array(), cal = nlohmann::json::array();
  for (const auto& r : runs) runsJson.push_back(r.toJson());
  for (const auto& name : options.calibrateOn)
    for (const auto& c : calibrations())
      if (c.device == name)
        cal.push_back({{"device", c.device},
                       {"precision", precisionName(c.precision)},
                       {"batch", c.batch},
                       {"images_per_s", c.imagesPerS},
                       {"peak_flops_per_s", peakFor(deviceNamed(c.device), c.precision)},
                       {"source", c.source},
                       {"device_source", deviceNamed(c.device).source}});
  return nlohmann::json{{"projection", true},
                        {"device", device.name},
                        {"device_title", device.title},
                        {"device_source", device.source},
                        {"device_memory_bytes", device.memoryBytes},
                        {"peak_fp32_flops_per_s", peakFor(device, Precision::Fp32)},
                        {"peak_fp16_flops_per_s", peakFor(device, Precision::Fp16)},
                        {"images_per_epoch", options.imagesPerEpoch},
                        {"link_bytes_per_s", options.linkBytesPerS},
                        {"link_source", options.linkBytesPerS == ProjectionOptions{}.linkBytesPerS
                                            ? nlohmann::json(kLinkSource)
                                            : nlohmann::json("--link-gbps")},
                        {"allowance",
                         {{"cuda_context_bytes", options.allowance.context},
                          {"workspace_bytes", options.allowance.workspace},
                          {"fragmentation", options.allowance.fragmentation}}},
                        {"calibration_flops_per_image", calibrationFlopsPerImage},
                        {"calibrations", cal},
                        {"runs", runsJson}};
}

std::string Projection::markdown() const {
  std::string t = "Projection (not a measurement) for " + device.title + ":\n\n";
  t += "| Configuration | GPUs | Batch per device (micro × accumulate) | Precision | Tensor memory/device (est., GiB) | "
       "Device memory (est., GiB) | Training GFLOP/image |";
  for (const auto& c : options.calibrateOn) t += " Epoch, calibrated on " + c + " |";
  t += "\n|---|---:|---:|---|---:|---:|---:|";
  for (std::size_t i = 0; i < options.calibrateOn.size(); ++i) t += "---:|";
  t += "\n";
  for (const auto& r : runs) {
    t += strf("| %s | %d | %lld × %lld | %s | %s | %s | %.1f |", r.name.c_str(), r.gpus,
              static_cast<long long>(r.microBatch), static_cast<long long>(r.accumulate), r.precision.c_str(),
              formatGiB(r.memory.peak).c_str(), (formatGiB(r.deviceBytes) + (r.fits ? "" : " (does not fit)")).c_str(),
              r.flopsPerImage / 1e9);
    for (const auto& x : r.timings)
      t += strf(" %s (%.0f img/s/device) |", formatDuration(x.epochS).c_str(), x.imagesPerSPerDevice);
    t += "\n";
  }
  t += strf("\nHow it is worked out (every figure an assumption or a published number, none measured on %s):\n",
            device.name.c_str());
  t += strf("- Memory: the spec's own training step measured on this machine's CPU with exprun's tracking allocator "
            "(`exprun plan --for cuda`), extrapolated linearly to the micro-batch; fp16 measured as bf16 (same size). "
            "Device memory = (tensor memory + %.0f MiB of cuDNN/cuBLAS workspaces + the input's device memory) × %.2f "
            "(caching-allocator fragmentation) + %.0f MiB (CUDA context).\n",
            options.allowance.workspace / 1048576.0, 1.0 + options.allowance.fragmentation,
            options.allowance.context / 1048576.0);
  t += strf("- Compute: images/s per device = efficiency × the device's peak / training FLOPs per image (counted from the "
            "model's convolutions and matrix products, forward + backward, 2 FLOPs per multiply-add). %s peak: "
            "%.1f TFLOP/s for fp32 (cuDNN uses TF32 by default), %.1f TFLOP/s for fp16/bf16 (tensor cores, fp32 "
            "accumulate); source: %s.\n",
            device.name.c_str(), peakFor(device, Precision::Fp32) / kT, peakFor(device, Precision::Fp16) / kT,
            device.source.c_str());
  t += strf("- Efficiency = a published ResNet-50 v1.5 training throughput × its counted %.1f GFLOP/image / that "
            "device's peak, same precision:\n",
            calibrationFlopsPerImage / 1e9);
  for (const auto& name : options.calibrateOn)
    for (const auto& c : calibrations())
      if (c.device == name) {
        const double peak = peakFor(deviceNamed(c.device), c.precision);
        t += strf("  - %s %s: %.0f img/s → %.1f %% of %.1f TFLOP/s (%s; peaks: %s)\n", c.device.c_str(),
                  precisionName(c.precision), c.imagesPerS, 100.0 * c.imagesPerS * calibrationFlopsPerImage / peak,
                  peak / kT, c.source.c_str(), deviceNamed(c.device).source.c_str());
      }
  t += strf("- Communication: a ring allreduce of the fp32 gradients once per optimizer step, 2(n−1)/n × the "
            "gradient bytes at a bus bandwidth of %.1f GB/s, not overlapped with compute (DDP overlaps most of it: "
            "an upper bound). %s\n",
            options.linkBytesPerS / 1e9,
            options.linkBytesPerS == ProjectionOptions{}.linkBytesPerS ? (std::string("Source: ") + kLinkSource + ".").c_str()
                                                                       : "The bandwidth was given with --link-gbps.");
  t += strf("- An epoch: %lld images (ILSVRC-2012 train). Data loading and evaluation are not modelled (assumed to "
            "keep up).\n",
            static_cast<long long>(options.imagesPerEpoch));
  return t;
}

namespace {

// One spec on `gpus` of the projection's device: its memory from the planner, its time from each
// calibration.
ProjectedRun projectRun(const Spec& spec, int gpus, const Projection& p) {
  const ProjectionOptions& o = p.options;
  ProjectedRun r;
  r.name = spec.name;
  r.gpus = gpus;
  if (r.gpus < 1) throw std::invalid_argument("--gpus must be at least 1");
  if (!spec.train.batching.batchSize)
    throw std::invalid_argument(spec.name + ": train.batch_size is auto; the projection needs a micro-batch");
  r.precision = precisionName(spec.train.numerics.precision);
  r.microBatch = *spec.train.batching.batchSize;
  r.accumulate = spec.train.batching.accumulate;
  r.globalBatch = r.microBatch * r.accumulate * r.gpus;
  log::info(strf("project: %s on %d x %s", spec.name.c_str(), r.gpus, p.device.name.c_str()));

  DeviceTarget target;
  target.deviceMemory = p.device.memoryBytes;
  target.gpus = r.gpus;
  target.globalBatch = r.globalBatch;
  target.probeBatches = o.probeBatches;
  target.allowance = o.allowance;
  const DevicePlan plan = planForDevice(spec, target);
  const DevicePlan::Row row = plan.rowAt(r.microBatch);
  r.memory = row.estimate;
  r.deviceBytes = row.device;
  r.fits = r.deviceBytes <= p.device.memoryBytes;

  r.flopsPerImage = countSpecFlops(spec).total;
  r.gradientBytes = r.gpus > 1 ? static_cast<double>(r.memory.gradients) : 0.0;
  r.allreduceSPerStep = r.gpus > 1 ? 2.0 * (r.gpus - 1) / r.gpus * r.gradientBytes / o.linkBytesPerS : 0.0;
  const double steps = static_cast<double>(o.imagesPerEpoch) / static_cast<double>(r.globalBatch);
  for (const auto& name : o.calibrateOn) {
    const Calibration& c = calibrationFor(name, spec.train.numerics.precision);
    ProjectedRun::Timing t;
    t.calibratedOn = name;
    t.efficiency = c.imagesPerS * p.calibrationFlopsPerImage / peakFor(deviceNamed(c.device), c.precision);
    t.imagesPerSPerDevice = t.efficiency * peakFor(p.device, spec.train.numerics.precision) / r.flopsPerImage;
    t.epochS = static_cast<double>(o.imagesPerEpoch) / (t.imagesPerSPerDevice * r.gpus) + steps * r.allreduceSPerStep;
    r.timings.push_back(t);
  }
  return r;
}

}  // namespace

Projection project(const std::vector<Spec>& specs, const std::vector<int>& gpus, const ProjectionOptions& o) {
  if (specs.size() != gpus.size()) throw std::invalid_argument("give one --gpus count per spec (or one for all)");
  if (o.imagesPerEpoch <= 0) throw std::invalid_argument("--images must be positive");
  if (!(o.linkBytesPerS > 0)) throw std::invalid_argument("--link-gbps must be positive");
  Projection p;
  p.options = o;
  p.device = deviceNamed(o.device);
  for (const auto& c : o.calibrateOn) deviceNamed(c);
  Spec reference = loadSpecFromString(
      "name: resnet50-v1.5\nmodel: {type: resnet50}\n"
      "data: {type: synthetic, channels: 3, height: 224, width: 224, num_classes: 1000}\n",
      "calibration.yaml");
  p.calibrationFlopsPerImage = countSpecFlops(reference).total;
  for (std::size_t i = 0; i < specs.size(); ++i) p.runs.push_back(projectRun(specs[i], gpus[i], p));
  return p;
}

}  // namespace exprun
