// Purpose: a run's set-up (see Setup.h).
#include "runner/train/Setup.h"

#include <algorithm>

#include "runner/api/Optimizer.h"
#include "runner/metrics/CpuMemory.h"
#include "runner/step/Device.h"
#include "runner/step/StepGraph.h"
#include "runner/util/Compat.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

// batch_size: auto — the planner's micro-batch and accumulation (and the techniques it needed),
// counting on CUDA the device memory of the loaded `data` beside the step (null on the CPU).
std::optional<MemoryPlan> planIfAuto(const Spec& spec, Dist& dist, const torch::Device& device, const Dataset* data) {
  const Batching& b = spec.train.batching;
  if (b.batchSize) return std::nullopt;
  if (b.memoryBudget.empty() || b.globalBatch == 0)
    throw std::invalid_argument("train.batch_size: auto needs train.memory_budget (e.g. 20GiB) and train.global_batch");
  std::int64_t budget;
  try {
    budget = parseBytes(b.memoryBudget);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("train.memory_budget: ") + e.what());
  }
  MemoryPlan plan = planMemory(spec, budget, b.globalBatch, dist, device, nullptr, data);
  log::info(plan.table());
  return plan;
}

// FLOPs of one training step per image, counted on a model of its own built before the run's seed
// is set (the run's weights and random draws stay those of a run without the count); the peak
// FLOP/s of every rank's device for the run's precision, by rule (the device's published peak, the
// CPU's ISA and clock: metrics/Hardware.h), measured only for a device no rule fits. A precision
// the device has no arithmetic for is warned about: it runs converted, usually slower than fp32.
RunMeasures measureRun(const RunSettings& s, Dist& dist) {
  RunMeasures f;
  f.flops = countSpecFlops(s.spec);
  const Precision precision = s.spec.train.numerics.precision;
  const PeakRule rule = peakRule(s.device, precision, s.threads);
  double mine = rule.flopsPerS;
  f.peakSource = rule.how;
  if (mine <= 0) {
    const PeakFlops peak = peakFlops(s.device, autocastDtype(precision).value_or(torch::kFloat));
    mine = peak.flopsPerS;
    f.peakSource = "measured GEMM peak (no rule fits this device): " + peak.key + (peak.cached ? " (cached)" : "");
  }
  f.peakFlopsPerS = dist.sum({mine})[0];
  f.peakSource += " x " + std::to_string(dist.worldSize()) + " rank(s)";
  f.precisionNative = rule.native;
  f.precisionMissing = rule.missing;
  if (!rule.native && dist.rank() == 0)
    log::warn(strf("train.precision %s: %s has no native %s arithmetic (needs %s); it runs converted to fp32, "
                   "usually slower than fp32 itself",
                   precisionName(precision), deviceName(s.device).c_str(), precisionName(precision),
                   rule.missing.c_str()));
  return f;
}

std::unique_ptr<Dataset> loadData(const Spec& spec) {
  std::unique_ptr<Dataset> data = build<DataKind>(spec.data);
  data->load();
  return data;
}

// train.input: whether batches cross as uint8 pixels (then the data plugin is told so). auto: on
// CUDA, where the plugin can make them; uint8 asked of a plugin that cannot is an error.
bool chooseInput(const Spec& spec, Dataset& data, const torch::Device& device) {
  const InputFormat asked = spec.train.execution.input;
  if (asked == InputFormat::Float) return false;
  const std::string why = data.whyNoBytes();
  if (asked == InputFormat::Auto && (!device.is_cuda() || !why.empty())) return false;
  if (!why.empty())
    throw std::invalid_argument("train.input: uint8: data plugin '" + spec.data.type() + "' cannot make uint8 batches: " +
                                why + " (use train.input: float or auto)");
  data.makeBytes();
  return true;
}

// micro-batch x processes x accumulation, and the learning rate scaled to that global batch.
BatchShape batchShape(const Spec& spec, Dist& dist) {
  BatchShape b;
  b.microBatch = *spec.train.batching.batchSize;
  b.accumulate = spec.train.batching.accumulate;
  b.globalBatch = b.microBatch * dist.worldSize() * b.accumulate;
  const LrSettings lr = lrOptions().read(spec.optimizer);
  b.lr = scaleLearningRate(lr.lr, lr.baseBatch, b.globalBatch, lr.scaleLr);
  return b;
}

LoaderOptions trainLoader(const RunSettings& s, Dist& dist) {
  LoaderOptions lo;
  lo.batchSize = s.batch.microBatch;
  lo.shuffle = true;
  lo.seed = static_cast<std::uint64_t>(s.spec.seed);
  lo.workers = static_cast<int>(s.spec.train.execution.workers);
  lo.prefetch = static_cast<int>(s.spec.train.execution.prefetch);
  lo.rank = dist.rank();
  lo.worldSize = dist.worldSize();
  lo.pinMemory = s.device.is_cuda();  // host-to-device copies are non_blocking
  lo.repeats = static_cast<int>(s.spec.train.batching.repeatedAugmentation);
  return lo;
}

LoaderOptions evalLoader(const RunSettings& s) {
  LoaderOptions lo = s.trainLoader;
  lo.shuffle = false;
  lo.padToEqual = false;
  lo.batchSize = s.spec.train.evaluation.evalBatchSize;
  lo.repeats = 1;
  return lo;
}

// An optimizer step takes `accumulate` micro-batches; the epoch's last step may take fewer.
std::int64_t stepsPerEpoch(const Dataset& data, const RunSettings& s) {
  LoaderOptions count = s.trainLoader;
  count.workers = 0;
  const std::int64_t microPerEpoch = BatchLoader(data, Split::Train, count).numBatches();
  if (microPerEpoch == 0 && s.trainLoader.repeats > 1)
    throw DataError("train.repeated_augmentation keeps floor(n / 256) * 256 training samples an epoch, and the training "
                    "split has " + std::to_string(data.size(Split::Train)));
  if (microPerEpoch == 0) throw DataError("data: the training split is empty");
  return (microPerEpoch + s.batch.accumulate - 1) / s.batch.accumulate;
}

std::int64_t totalSteps(const RunSettings& s) {
  const std::int64_t all = s.spec.train.length.epochs * s.batch.stepsPerEpoch;
  return s.spec.train.length.maxSteps > 0 ? std::min(all, s.spec.train.length.maxSteps) : all;
}

Provenance provenanceOf(const TrainSetup& run, Dist& dist) {
  const RunSettings& s = run.settings;
  const RunMeasures& f = run.measures;
  Provenance p = Provenance::ofThisRun();
  p.add("threads", s.threads);
  p.add("device", s.device.str());
  p.add("world_size", dist.worldSize());
  p.add("backend", dist.backendName());
  p.add("comm", s.hookName);
  p.add("launcher", dist.env().launcher);
  if (!dist.interfaces().empty()) p.add("gloo_interfaces", dist.interfaces());
  p.add("parameters", countParameters(*run.learner.model));
  p.add("global_batch", s.batch.globalBatch);
  p.add("micro_batch", s.batch.microBatch);
  p.add("accumulate", s.batch.accumulate);
  p.add("scaled_lr", s.batch.lr);
  p.add("steps_per_epoch", s.batch.stepsPerEpoch);
  p.add("total_steps", s.totalSteps);
  p.add("train_samples", run.data->size(Split::Train));
  p.add("test_samples", run.data->size(Split::Test));
  p.add("precision", precisionName(s.spec.train.numerics.precision));
  p.add("channels_last", s.spec.train.numerics.channelsLast);
  p.add("input", s.bytesInput ? "uint8" : "float");
  p.add("ema_decay", s.spec.train.rules.emaDecay);
  p.add("checkpointed_stages", run.learner.model->recomputed());  // the result file's name for recomputed stages
  if (run.learner.model->recomputedEvery() > 0) p.add("checkpointed_every", run.learner.model->recomputedEvery());
  if (s.plan) p.add("memory_plan", s.plan->toJson());
  p.add("flops_per_image", f.flops.total);
  p.add("forward_flops_per_image", f.flops.forward);
  p.add("peak_flops_per_s", f.peakFlopsPerS);
  p.add("peak_flops_source", f.peakSource);
  p.add("device_name", deviceName(s.device));
  p.add("device_features", deviceFeatures(s.device));
  p.add("precision_native", f.precisionNative);
  if (!f.precisionNative) p.add("precision_missing", f.precisionMissing);
  return p;
}

}  // namespace

TrainSetup setUp(const Spec& spec, Dist& dist) { return setUp(spec, dist, chooseDevice(spec, dist.env())); }

TrainSetup setUp(const Spec& spec, Dist& dist, const torch::Device& device) {
  TrainSetup run;
  RunSettings& s = run.settings;
  s.threads = chooseThreads(spec.train.execution, dist.env());
  compat::setThreads(s.threads);
  s.device = device;
  if (!s.device.is_cuda()) installCpuAllocationTracking();  // peak_allocated_bytes on the CPU
  dist.setDevice(s.device);
  // On CUDA the data is loaded before the plan, which counts its device memory (a plan changes
  // train.* only); on the CPU after it, as the plan's probes measure the process's resident set.
  if (s.device.is_cuda()) run.data = loadData(spec);
  s.plan = planIfAuto(spec, dist, s.device, run.data.get());
  s.spec = s.plan ? applyPlan(spec, *s.plan) : spec;
  run.measures = measureRun(s, dist);
  torch::manual_seed(static_cast<std::uint64_t>(s.spec.seed));
  if (!run.data) run.data = loadData(s.spec);
  run.data->placeOn(s.device);  // on the CPU too: a plugin may refuse an option that needs CUDA
  s.bytesInput = chooseInput(s.spec, *run.data, s.device);
  s.batch = batchShape(s.spec, dist);
  run.learner = buildLearner(s.spec, run.data->info(), s.device, dist, s.batch.lr);
  s.hookName = dist.active() ? s.spec.distributed.comm.type() : std::string("none");
  s.trainLoader = trainLoader(s, dist);
  // On CUDA, workers that decode on the host need the cores (a plugin whose batches the device makes
  // or decodes leaves its workers little to do).
  if (const std::string w = workersWarning(s.trainLoader.workers, processCores(dist.env().localWorldSize), s.device);
      !w.empty()) {
    const Dataset::DeviceHoldings held = run.data->deviceHoldings(s.trainLoader.batchSize);
    if (held.work == 0 && held.resident == 0) log::warn(w);
  }
  s.evalLoader = evalLoader(s);
  s.batch.stepsPerEpoch = stepsPerEpoch(*run.data, s);
  s.totalSteps = totalSteps(s);
  run.schedule = build<SchedulerKind>(s.spec.scheduler, ScheduleContext{s.batch.lr, s.batch.stepsPerEpoch, s.totalSteps});
  run.methods = Methods(s.spec.methods);
  if (s.spec.train.execution.cudaGraph) {
    std::vector<std::string> methods;
    for (std::size_t i = 0; i < run.methods.size(); ++i) methods.push_back(run.methods.type(i));
    const std::string why = whyNoCudaGraph(s.spec, s.device, dist.active(), methods, *run.learner.optimizer,
                                           run.schedule->momentum(0).has_value());
    if (!why.empty()) throw std::invalid_argument("train.cuda_graph: " + why);
  }
  run.provenance = provenanceOf(run, dist);
  return run;
}

double TrainSetup::applySchedule(std::int64_t step) {
  const double value = schedule->lr(step);
  learner.optimizer->setLearningRate(value);
  if (auto m = schedule->momentum(step)) learner.optimizer->setMomentum(*m);
  return value;
}

std::string TrainSetup::table() const {
  auto rows = spec().rows();
  const auto more = provenance.rows();
  rows.insert(rows.end(), more.begin(), more.end());
  size_t w0 = 7, w1 = 3;
  for (const auto& r : rows) w0 = std::max(w0, r[0].size()), w1 = std::max(w1, r[1].size());
  std::string out = "resolved spec:\n";
  out += strf("  %-*s  %-*s  %s\n", static_cast<int>(w0), "section", static_cast<int>(w1), "key", "value");
  for (const auto& r : rows)
    out += strf("  %-*s  %-*s  %s\n", static_cast<int>(w0), r[0].c_str(), static_cast<int>(w1), r[1].c_str(),
                r[2].c_str());
  out.pop_back();
  return out;
}

RunInfo TrainSetup::runInfo(std::int64_t firstStep) const {
  RunInfo r;
  r.name = spec().name;
  r.epochs = spec().train.length.epochs;
  r.stepsPerEpoch = settings.batch.stepsPerEpoch;
  r.totalSteps = settings.totalSteps;
  r.globalBatch = settings.batch.globalBatch;
  r.worldSize = settings.trainLoader.worldSize;
  r.firstStep = firstStep;
  if (learner.task->unit() == "tokens") {
    r.unit = "tokens";
    r.unitsPerSample = learner.task->unitsPerSample(data->info());
  }
  return r;
}

void TrainSetup::continueInNewSteps(Restored& r) const {
  TrainPosition& pos = r.progress.position;
  LoaderOptions count = settings.trainLoader;  // the rest of the epoch, counted as an epoch is counted
  count.workers = 0;
  count.epoch = pos.epoch;
  count.startSample = pos.sample;
  const std::int64_t micro = BatchLoader(*data, Split::Train, count).numBatches();
  const std::int64_t accumulate = settings.batch.accumulate, perEpoch = settings.batch.stepsPerEpoch;
  const std::int64_t steps = (micro + accumulate - 1) / accumulate;
  const std::int64_t done = std::max<std::int64_t>(0, perEpoch - steps);
  pos.step = (pos.epoch - 1) * perEpoch + done;
  r.progress.meters.steps = done;
  r.change->step = pos.step;
}

}  // namespace exprun
