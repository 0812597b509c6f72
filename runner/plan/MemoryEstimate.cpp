// Purpose: one step's memory by holder, its linear model in the micro-batch, and plans for a device
// this machine does not have (see MemoryEstimate.h).
#include "runner/plan/MemoryEstimate.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "runner/metrics/CpuMemory.h"
#include "runner/metrics/Meters.h"
#include "runner/step/Learner.h"
#include "runner/step/Step.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {

namespace {

// Bytes of the distinct storages behind `tensors` (views of one bucket count once).
std::int64_t storageBytes(const std::vector<torch::Tensor>& tensors) {
  std::unordered_set<const void*> seen;
  std::int64_t n = 0;
  for (const auto& t : tensors)
    if (t.defined() && t.has_storage() && seen.insert(t.storage().unsafeGetStorageImpl()).second)
      n += static_cast<std::int64_t>(t.storage().nbytes());
  return n;
}

std::string gib(std::int64_t bytes) { return strf("%.2f", static_cast<double>(bytes) / 1073741824.0); }

}  // namespace

nlohmann::json StepMemory::toJson() const {
  return nlohmann::json{{"micro_batch", batch},
                        {"parameters_bytes", parameters},
                        {"gradients_bytes", gradients},
                        {"optimizer_bytes", optimizer},
                        {"ema_bytes", ema},
                        {"comm_state_bytes", commState},
                        {"activations_bytes", activations()},
                        {"peak_allocated_bytes", peak}};
}

StepMemory measureStepMemory(const Spec& spec, std::int64_t batch, Dist& group, const torch::Device& device) {
  if (!device.is_cuda()) installCpuAllocationTracking();
  Spec probe = spec;
  probe.train.batching.batchSize = batch;
  torch::manual_seed(static_cast<std::uint64_t>(spec.seed));
  const DataInfo info = build<DataKind>(spec.data)->info();
  StepMemory m;
  m.batch = batch;
  const std::int64_t base = allocatedBytes(device);
  {
    Learner learner = buildLearner(probe, info, device, group, 0.01);
    learner.reducer->hook().steadyState();
    learner.model->train();
    TrainStep step(learner, probe.train.numerics, probe.train.rules, group, device);
    auto next = [&] { return learner.task->probe(info, batch); };
    EpochMeters meters;
    StepSums sums = StepSums::from(meters, device);
    TrainPosition position;
    resetPeakMemory(device);
    // One micro-batch per step: accumulating more adds to gradients that exist already.
    for (std::int64_t i = 0; i < 3; ++i) step.run(next, 1, i, 1, sums, meters, position);
    m.processPeak = peakMemoryBytes(device);
    if (base < 0) {  // EXPRUN_CPU_ALLOC_TRACKING=0: the process peak only
      m.peak = -1;
      return m;
    }
    m.peak = peakAllocatedBytes(device) - base;
    const std::int64_t live = allocatedBytes(device) - base;  // what stays between steps

    std::vector<torch::Tensor> weights = learner.model->parameters(), grads, hookState;
    for (const auto& b : learner.model->buffers()) weights.push_back(b);
    for (const auto& p : learner.model->parameters()) grads.push_back(p.grad());
    for (const auto& [name, t] : learner.reducer->hook().state()) hookState.push_back(t);
    m.parameters = storageBytes(weights);
    m.gradients = storageBytes(grads);
    m.ema = learner.ema ? storageBytes(learner.ema->averages()) : 0;
    m.commState = storageBytes(hookState);
    m.optimizer = live - m.parameters - m.gradients - m.ema - m.commState;
  }
  return m;
}

StepMemory MemoryCurve::at(std::int64_t batch) const {
  StepMemory m = measured.back();
  m.batch = batch;
  const double act = std::max(floor, fixed + perSample * static_cast<double>(batch));
  m.peak = m.persistent() + static_cast<std::int64_t>(std::llround(act));
  m.processPeak = -1;
  return m;
}

namespace {

// Slopes of activations over micro-batch between consecutive measurements.
double slope(const StepMemory& a, const StepMemory& b) {
  return static_cast<double>(b.activations() - a.activations()) / static_cast<double>(b.batch - a.batch);
}

}  // namespace

MemoryCurve fitStepMemory(const Spec& spec, const std::vector<std::int64_t>& batches, Dist& group,
                          const torch::Device& device, std::int64_t maxBatch) {
  std::vector<std::int64_t> sorted = batches;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  if (sorted.size() < 2 || sorted.front() < 1)
    throw std::invalid_argument("the memory curve needs at least two different positive micro-batches");
  if (!device.is_cuda()) installCpuAllocationTracking();
  if (allocatedBytes(device) < 0)
    throw std::invalid_argument("the memory breakdown on the CPU needs the tracking allocator "
                                "(EXPRUN_CPU_ALLOC_TRACKING=0 is set)");
  MemoryCurve c;
  auto measure = [&](std::int64_t b) {
    c.measured.push_back(measureStepMemory(spec, b, group, device));
    log::info(strf("estimate: micro-batch %lld: %s MiB of live tensors at the peak, %s MiB of them activations",
                   static_cast<long long>(b), formatMiB(c.measured.back().peak).c_str(),
                   formatMiB(c.measured.back().activations()).c_str()));
  };
  for (std::int64_t b : sorted) measure(b);
  // Until the last three measurements lie on one line (slopes within 5 %), double the batch: at
  // small batches a peak that does not grow with it (the largest gradient's temporaries) can
  // hide the activations.
  auto linear = [&] {
    const std::size_t n = c.measured.size();
    if (n < 3) return n == 2 && c.measured[1].activations() > c.measured[0].activations();
    const double s1 = slope(c.measured[n - 3], c.measured[n - 2]), s2 = slope(c.measured[n - 2], c.measured[n - 1]);
    return s2 > 0 && std::abs(s1 - s2) <= 0.05 * s2;
  };
  while (!linear() && c.measured.back().batch * 2 <= std::max(maxBatch, sorted.back())) measure(c.measured.back().batch * 2);
  c.linearFrom = c.measured.size() >= 3 ? c.measured[c.measured.size() - 3].batch : c.measured.front().batch;
  double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
  // The floor: the least of the measurements below the linear part (none: 0).
  bool below = false;
  for (const auto& m : c.measured) {
    if (m.batch < c.linearFrom) {
      c.floor = below ? std::min(c.floor, static_cast<double>(m.activations())) : static_cast<double>(m.activations());
      below = true;
      continue;
    }
    const double x = static_cast<double>(m.batch), y = static_cast<double>(m.activations());
    sx += x, sy += y, sxx += x * x, sxy += x * y, n += 1;
  }
  const double den = n * sxx - sx * sx;
  if (den <= 0) throw std::invalid_argument("the memory curve needs two different micro-batches");
  c.perSample = (n * sxy - sx * sy) / den;
  c.fixed = (sy - c.perSample * sx) / n;
  if (!(c.perSample > 0))
    throw std::invalid_argument(strf("the activations measured at micro-batches up to %lld do not grow with the "
                                     "micro-batch: nothing to extrapolate (give larger --probe-batches)",
                                     static_cast<long long>(c.measured.back().batch)));
  c.linear = linear();
  if (!c.linear)
    log::warn(strf("estimate: the activations did not grow linearly up to micro-batch %lld; the extrapolation is rough",
                   static_cast<long long>(c.measured.back().batch)));
  return c;
}

nlohmann::json DeviceExtras::toJson() const {
  nlohmann::json j{{"data_resident_bytes", dataResident},
                   {"batches_ahead_bytes", batchesAhead},
                   {"decode_bytes", decode},
                   {"graph_eager_bytes", graphEager}};
  if (!notCounted.empty()) j["not_counted"] = notCounted;
  return j;
}

DeviceExtras deviceExtras(const Spec& spec, const Dataset* data, std::int64_t micro, std::int64_t activations,
                      const std::string& why) {
  DeviceExtras e;
  const std::unique_ptr<Dataset> built = data ? nullptr : build<DataKind>(spec.data);
  const Dataset& plugin = data ? *data : *built;
  const DataInfo info = plugin.info();
  const InputFormat input = spec.train.execution.input;
  const bool bytes = input != InputFormat::Float && plugin.whyNoBytes().empty();
  const auto int64Bytes = static_cast<std::int64_t>(sizeof(std::int64_t));
  const std::int64_t perSample =
      info.vocabSize > 0 ? 2 * info.sequenceLength * int64Bytes  // token ids and their targets
                         : info.channels * info.height * info.width * (bytes ? 1 : static_cast<std::int64_t>(sizeof(float))) +
                               int64Bytes;
  e.batchesAhead = spec.train.execution.copyAhead * micro * perSample;
  if (data) {
    const Dataset::DeviceHoldings h = data->deviceHoldings(micro);
    e.dataResident = h.resident;
    e.decode = bytes ? h.work : 0;  // the device's decode makes uint8 batches only
  } else {
    e.notCounted = "the data plugin's own device memory" + (why.empty() ? std::string() : " (" + why + ")");
  }
  if (spec.train.execution.cudaGraph) e.graphEager = std::max<std::int64_t>(activations, 0);
  return e;
}

std::shared_ptr<Dataset> loadedForPlan(const Spec& spec, std::string* why) {
  try {
    std::shared_ptr<Dataset> data = build<DataKind>(spec.data);
    data->load();
    return data;
  } catch (const std::exception& e) {
    *why = std::string("its data did not load here: ") + e.what();
    log::warn("plan: the data plugin's device memory is not counted: " + *why);
    return nullptr;
  }
}

std::int64_t deviceBytes(std::int64_t tensorPeak, const DeviceAllowance& a) {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(tensorPeak + a.workspace) * (1.0 + a.fragmentation))) +
         a.context;
}

DevicePlan planForDevice(const Spec& spec, const DeviceTarget& target, std::shared_ptr<const Dataset> data) {
  if (target.device != "cuda")
    throw std::invalid_argument("--for '" + target.device + "': the estimate is for CUDA devices (--for cuda)");
  if (target.deviceMemory <= 0) throw std::invalid_argument("--device-memory must be positive");
  if (target.gpus < 1) throw std::invalid_argument("--gpus must be at least 1");
  DevicePlan plan;
  plan.target = target;
  std::int64_t global = target.globalBatch > 0 ? target.globalBatch : spec.train.batching.globalBatch;
  if (global <= 0 && spec.train.batching.batchSize)
    global = *spec.train.batching.batchSize * target.gpus * spec.train.batching.accumulate;
  if (global <= 0)
    throw std::invalid_argument("no global batch: give --global-batch (the spec has batch_size: auto and no "
                                "train.global_batch)");
  if (global % target.gpus != 0)
    throw std::invalid_argument(strf("global batch %lld is not divisible by %d GPUs", static_cast<long long>(global),
                                     target.gpus));
  plan.target.globalBatch = global;
  plan.perDevice = global / target.gpus;

  Spec cpu = spec;
  cpu.distributed.shard = "none";  // measured as DDP; each row divides what distributed.shard shards (shardedOver)
  plan.precision = precisionName(spec.train.numerics.precision);
  if (cpu.train.numerics.precision == Precision::Fp16) cpu.train.numerics.precision = Precision::Bf16;  // same element size
  plan.measuredAs = precisionName(cpu.train.numerics.precision);
  const torch::Device device(torch::kCPU);
  std::unique_ptr<Dist> group = target.gpus > 1 ? Dist::alone(device) : std::make_unique<Dist>();
  plan.curve = fitStepMemory(cpu, target.probeBatches, *group, device, 
                             std::min<std::int64_t>(std::max<std::int64_t>(plan.perDevice, 8), 64));

  // The data plugin's device memory: from the plugin given, else one loaded here where its data is.
  plan.data = data ? std::move(data) : loadedForPlan(spec, &plan.dataWhy);
  plan.spec = spec;
  plan.bucketBytes = build<CommKind>(spec.distributed.comm)->bucketing().bucketMb * 1048576.0;
  std::vector<std::int64_t> candidates;
  for (std::int64_t b = 1; b < plan.perDevice; b *= 2) candidates.push_back(b);
  candidates.push_back(plan.perDevice);
  for (std::int64_t b = plan.perDevice; b >= 1; --b) {
    if (plan.perDevice % b != 0) continue;
    if (plan.rowAt(b).fits) {
      plan.microBatch = b;
      plan.accumulate = plan.perDevice / b;
      break;
    }
  }
  if (plan.microBatch > 0) candidates.push_back(plan.microBatch);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (std::int64_t b : candidates) plan.rows.push_back(plan.rowAt(b));
  return plan;
}

StepMemory shardedOver(StepMemory m, const std::string& shard, int gpus, double bucketBytes) {
  if (shard == "none" || gpus <= 1) return m;
  const std::int64_t before = m.persistent();
  const std::int64_t grads = m.gradients;
  auto split = [gpus](std::int64_t bytes) { return (bytes + gpus - 1) / gpus; };
  m.optimizer = split(m.optimizer);
  if (shard == "gradients") m.gradients = split(m.gradients);
  const double working = 2.0 * std::min(bucketBytes, static_cast<double>(grads));
  m.peak += m.persistent() - before + static_cast<std::int64_t>(std::llround(working));
  return m;
}

DevicePlan::Row DevicePlan::rowAt(std::int64_t micro) const {
  Row r;
  r.micro = micro;
  r.estimate = shardedOver(curve.at(micro), spec.distributed.shard, target.gpus, bucketBytes);
  r.extras = deviceExtras(spec, data.get(), micro, r.estimate.activations(), dataWhy);
  r.allocated = r.estimate.peak + target.allowance.workspace + r.extras.total();
  r.device = deviceBytes(r.estimate.peak + r.extras.total(), target.allowance);
  r.fits = r.device <= target.deviceMemory;
  return r;
}

DevicePlan::Row DevicePlan::chosen() const {
  for (const auto& r : rows)
    if (r.micro == microBatch) return r;
  throw std::logic_error("DevicePlan: no row for the chosen micro-batch");
}

nlohmann::json DevicePlan::toJson() const {
  nlohmann::json measured = nlohmann::json::array(), rowsJson = nlohmann::json::array();
  for (const auto& m : curve.measured) measured.push_back(m.toJson());
  for (const auto& r : rows) {
    nlohmann::json j = r.estimate.toJson();
    j["extras"] = r.extras.toJson();
    j["device_allocated_bytes"] = r.allocated;
    j["device_bytes"] = r.device;
    j["fits"] = r.fits;
    rowsJson.push_back(j);
  }
  return nlohmann::json{
      {"device", target.device},
      {"device_memory_bytes", target.deviceMemory},
      {"gpus", target.gpus},
      {"global_batch", target.globalBatch},
      {"per_device_batch", perDevice},
      {"shard", spec.distributed.shard},
      {"precision", precision},
      {"measured_as", measuredAs},
      {"measured_on", "cpu (tracking allocator)"},
      {"allowance",
       {{"cuda_context_bytes", target.allowance.context},
        {"workspace_bytes", target.allowance.workspace},
        {"fragmentation", target.allowance.fragmentation}}},
      {"activations_fixed_bytes", curve.fixed},
      {"activations_per_sample_bytes", curve.perSample},
      {"activations_floor_bytes", curve.floor},
      {"linear_from_micro_batch", curve.linearFrom},
      {"linear", curve.linear},
      {"measured", measured},
      {"candidates", rowsJson},
      {"micro_batch", microBatch > 0 ? nlohmann::json(microBatch) : nlohmann::json(nullptr)},
      {"accumulate", microBatch > 0 ? nlohmann::json(accumulate) : nlohmann::json(nullptr)}};
}

std::string DevicePlan::table() const {
  const DeviceAllowance& a = target.allowance;
  std::string t = strf(
      "memory estimate for %d x %s with %s GiB each, global batch %lld (%lld per device), %s\n", target.gpus,
      target.device.c_str(), gib(target.deviceMemory).c_str(), static_cast<long long>(target.globalBatch),
      static_cast<long long>(perDevice), precision.c_str());
  std::string probes;
  for (const auto& m : curve.measured) probes += (probes.empty() ? "" : ", ") + std::to_string(m.batch);
  t += strf("measured here: the spec's step on the CPU's tracking allocator at micro-batches %s%s;\n", probes.c_str(),
            measuredAs != precision ? (" (" + precision + " measured as " + measuredAs + ", same size)").c_str() : "");
  const std::string line = strf("%s MiB + %s MiB x micro-batch", formatMiB(std::llround(curve.fixed)).c_str(),
                                formatMiB(std::llround(curve.perSample)).c_str());
  t += strf("activations + temporaries = %s (least squares from micro-batch %lld%s)\n",
            curve.floor > 0 ? ("max(" + formatMiB(std::llround(curve.floor)) + " MiB, " + line + ")").c_str() : line.c_str(),
            static_cast<long long>(curve.linearFrom), curve.linear ? "" : "; not yet linear there: rough");
  t += strf("input = the data plugin's device memory + train.copy_ahead batches + one batch's decode (data.decode: "
            "gpu)%s\n",
            rows.empty() || rows.front().extras.notCounted.empty()
                ? ""
                : ("; not counted: " + rows.front().extras.notCounted).c_str());
  if (!rows.empty() && rows.front().extras.graphEager > 0)
    t += "graph = train.cuda_graph: an eager step's activations beside the graph's pool (the epoch's last batch)\n";
  if (spec.distributed.shard != "none" && target.gpus > 1)
    t += strf("distributed.shard: %s: the optimizer's state%s divided over the %d devices, two gradient buckets added "
              "to the peak for the reduce-scatter and the all-gather (from the DDP step measured)\n",
              spec.distributed.shard.c_str(), spec.distributed.shard == "gradients" ? " and the gradients" : "",
              target.gpus);
  t += strf("allocated = the step's tensors + %s MiB workspaces + input + graph; device = allocated x %.2f (allocator "
            "fragmentation) + %s MiB CUDA context\n\n",
            formatMiB(a.workspace).c_str(), 1.0 + a.fragmentation, formatMiB(a.context).c_str());
  t += strf("%7s %9s %9s %9s %7s %7s %12s %10s %8s %8s %9s  %s\n", "micro", "params", "grads", "optim", "ema", "comm",
            "activations", "allocated", "input", "graph", "device", "fits");
  t += strf("%7s %9s %9s %9s %7s %7s %12s %10s %8s %8s %9s\n", "", "MiB", "MiB", "MiB", "MiB", "MiB", "MiB", "GiB",
            "MiB", "MiB", "GiB");
  for (const auto& r : rows) {
    const StepMemory& e = r.estimate;
    t += strf("%7lld %9s %9s %9s %7s %7s %12s %10s %8s %8s %9s  %s%s\n", static_cast<long long>(r.micro),
              formatMiB(e.parameters).c_str(), formatMiB(e.gradients).c_str(), formatMiB(e.optimizer).c_str(), formatMiB(e.ema).c_str(),
              formatMiB(e.commState).c_str(), formatMiB(e.activations()).c_str(), gib(r.allocated).c_str(),
              formatMiB(r.extras.input()).c_str(), formatMiB(r.extras.graphEager).c_str(), gib(r.device).c_str(),
              r.fits ? "yes" : "no", r.micro == microBatch ? "  <- plan" : "");
  }
  if (microBatch == 0)
    t += strf("\nplan: no micro-batch fits %s GiB (try precision bf16/fp16, or train.activation_checkpointing: "
              "[all] with activation_checkpointing_every: 1)\n",
              gib(target.deviceMemory).c_str());
  else
    t += strf("\nplan: micro-batch %lld x accumulate %lld x %d GPUs = global batch %lld; about %s GiB allocated, %s GiB "
              "of the device's %s GiB\n",
              static_cast<long long>(microBatch), static_cast<long long>(accumulate), target.gpus,
              static_cast<long long>(target.globalBatch), gib(chosen().allocated).c_str(),
              gib(chosen().device).c_str(), gib(target.deviceMemory).c_str());
  return t;
}

}  // namespace exprun
