// Purpose: a run's set-up (see Setup.h).
#include "runner/train/Setup.h"

#include <algorithm>

#include "runner/api/Optimizer.h"
#include "runner/metrics/CpuMemory.h"
#include "runner/step/Device.h"
#include "runner/train/Compression.h"
#include "runner/util/Compat.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

// batch_size: auto — the planner's micro-batch and accumulation (and the techniques it needed).
std::optional<MemoryPlan> planIfAuto(const Spec& spec, Dist& dist, const torch::Device& device) {
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
  MemoryPlan plan = planMemory(spec, budget, b.globalBatch, dist, device);
  log::info(plan.table());
  return plan;
}

void setUpLoaders(TrainSetup& s, Dist& dist) {
  LoaderOptions& lo = s.trainLoader;
  lo.batchSize = s.microBatch;
  lo.shuffle = true;
  lo.seed = static_cast<std::uint64_t>(s.spec.seed);
  lo.workers = static_cast<int>(s.spec.train.execution.workers);
  lo.prefetch = static_cast<int>(s.spec.train.execution.prefetch);
  lo.rank = dist.rank();
  lo.worldSize = dist.worldSize();
  lo.pinMemory = s.device.is_cuda();  // host-to-device copies are non_blocking
  s.evalLoader = lo;
  s.evalLoader.shuffle = false;
  s.evalLoader.padToEqual = false;
  s.evalLoader.batchSize = s.spec.train.evaluation.evalBatchSize;
}

void setUpSchedule(TrainSetup& s) {
  LoaderOptions count = s.trainLoader;
  count.workers = 0;
  const std::int64_t microPerEpoch = BatchLoader(*s.data, Split::Train, count).numBatches();
  if (microPerEpoch == 0) throw DataError("data: the training split is empty");
  // An optimizer step takes `accumulate` micro-batches; the epoch's last step may take fewer.
  s.stepsPerEpoch = (microPerEpoch + s.accumulate - 1) / s.accumulate;
  s.totalSteps = s.spec.train.length.epochs * s.stepsPerEpoch;
  if (s.spec.train.length.maxSteps > 0) s.totalSteps = std::min(s.totalSteps, s.spec.train.length.maxSteps);
  s.schedule = build<SchedulerKind>(s.spec.scheduler, ScheduleContext{s.lr, s.stepsPerEpoch, s.totalSteps});
}

// FLOPs of one training step per image, counted on a model of its own built before the run's seed
// is set (the run's weights and random draws stay those of a run without the count); the peak
// FLOP/s of every rank's device for the run's precision, by rule (the card's published peak, the
// CPU's ISA and clock: metrics/Hardware.h), measured only for a device no rule fits. A precision
// the device has no arithmetic for is warned about: it runs converted, usually slower than fp32.
void countFlops(TrainSetup& s, Dist& dist) {
  s.flops = countSpecFlops(s.spec);
  const Precision precision = s.spec.train.numerics.precision;
  const PeakRule rule = peakRule(s.device, precision, s.threads);
  double mine = rule.flopsPerS;
  s.peakSource = rule.how;
  if (mine <= 0) {
    const PeakFlops peak = peakFlops(s.device, autocastDtype(precision).value_or(torch::kFloat));
    mine = peak.flopsPerS;
    s.peakSource = "measured GEMM peak (no rule fits this device): " + peak.key + (peak.cached ? " (cached)" : "");
  }
  s.peakFlopsPerS = dist.sum({mine})[0];
  s.peakSource += " x " + std::to_string(dist.worldSize()) + " rank(s)";
  s.precisionNative = rule.native;
  s.precisionMissing = rule.missing;
  if (!rule.native && dist.rank() == 0)
    log::warn(strf("train.precision %s: %s has no native %s arithmetic (needs %s); it runs converted to fp32, "
                   "usually slower than fp32 itself",
                   precisionName(precision), deviceName(s.device).c_str(), precisionName(precision),
                   rule.missing.c_str()));
}

void recordProvenance(TrainSetup& s, Dist& dist) {
  Provenance& p = s.provenance;
  p = Provenance::ofThisRun();
  p.add("threads", s.threads);
  p.add("device", s.device.str());
  p.add("world_size", dist.worldSize());
  p.add("backend", dist.backendName());
  p.add("comm", s.hookName);
  p.add("launcher", dist.env().launcher);
  if (!dist.interfaces().empty()) p.add("gloo_interfaces", dist.interfaces());
  p.add("parameters", countParameters(*s.parts.model));
  p.add("global_batch", s.globalBatch);
  p.add("micro_batch", s.microBatch);
  p.add("accumulate", s.accumulate);
  p.add("scaled_lr", s.lr);
  p.add("steps_per_epoch", s.stepsPerEpoch);
  p.add("total_steps", s.totalSteps);
  p.add("train_samples", s.data->size(Split::Train));
  p.add("test_samples", s.data->size(Split::Test));
  p.add("precision", precisionName(s.spec.train.numerics.precision));
  p.add("channels_last", s.spec.train.numerics.channelsLast);
  p.add("ema_decay", s.spec.train.rules.emaDecay);
  p.add("checkpointed_stages", s.parts.model->recomputed());  // the result file's name for recomputed stages
  if (s.parts.model->recomputedEvery() > 0) p.add("checkpointed_every", s.parts.model->recomputedEvery());
  if (s.plan) p.add("memory_plan", s.plan->toJson());
  p.add("flops_per_image", s.flops.total);
  p.add("forward_flops_per_image", s.flops.forward);
  p.add("peak_flops_per_s", s.peakFlopsPerS);
  p.add("peak_flops_source", s.peakSource);
  p.add("device_name", deviceName(s.device));
  p.add("device_features", deviceFeatures(s.device));
  p.add("precision_native", s.precisionNative);
  if (!s.precisionNative) p.add("precision_missing", s.precisionMissing);
}

// compress: int8 only where its kernels run (refused before anything is loaded).
void checkQuantizable(const TrainSetup& s) {
  const CompressConfig& c = s.spec.compress;
  if (c.quantize != "none" && s.device.is_cuda())
    throw std::invalid_argument("compress.quantize: int8 runs on LibTorch's CPU kernels (quantized::, x86/oneDNN), "
                                "and this run is on CUDA: set train.device: cpu, or compress.quantize: none");
  if (c.quantize != "none") {
    const auto& engines = at::globalContext().supportedQEngines();
    if (std::none_of(engines.begin(), engines.end(), [](at::QEngine e) {
          return e == at::QEngine::X86 || e == at::QEngine::FBGEMM || e == at::QEngine::ONEDNN;
        }))
      throw std::invalid_argument("compress.quantize: this LibTorch has no x86 int8 engine (x86, fbgemm, oneDNN)");
  }
}

// compress.prune: the pruner, whose reference is the model as built (full width: a checkpoint's
// widths are applied later), and the penalty it adds to the gradients.
void setUpPruner(TrainSetup& s) {
  if (s.spec.compress.prune.type() == "none") return;
  const DataInfo info = s.data->info();
  s.pruner = std::make_unique<ChannelPruner>(s.spec, *s.parts.model,
                                             std::vector<std::int64_t>{info.channels, info.height, info.width});
  auto scales = s.pruner->penalizedScales(*s.parts.model);
  const Pruner* pruner = &s.pruner->pruner();
  s.parts.beforeUpdate = [pruner, scales] { pruner->penalize(scales); };
}

}  // namespace

TrainSetup setUp(const Spec& spec, Dist& dist) {
  TrainSetup s;
  s.spec = spec;
  s.threads = chooseThreads(spec.train.execution, dist.env());
  compat::setThreads(s.threads);
  s.device = chooseDevice(spec, dist.env());
  if (!s.device.is_cuda()) installCpuAllocationTracking();  // peak_allocated_bytes on the CPU
  dist.setDevice(s.device);
  s.plan = planIfAuto(spec, dist, s.device);
  if (s.plan) s.spec = applyPlan(s.spec, *s.plan);
  countFlops(s, dist);
  checkQuantizable(s);
  torch::manual_seed(static_cast<std::uint64_t>(s.spec.seed));
  s.data = build<DataKind>(s.spec.data);
  s.data->load();
  s.microBatch = *s.spec.train.batching.batchSize;
  s.accumulate = s.spec.train.batching.accumulate;
  s.globalBatch = s.microBatch * dist.worldSize() * s.accumulate;
  const LrSettings lr = lrOptions().read(s.spec.optimizer);
  s.lr = scaleLearningRate(lr.lr, lr.baseBatch, s.globalBatch, lr.scaleLr);
  s.parts = buildParts(s.spec, s.data->info(), s.device, dist, s.lr);
  s.dist = &dist;
  setUpPruner(s);
  s.hookName = dist.active() ? s.spec.distributed.comm.type() : std::string("none");
  setUpLoaders(s, dist);
  setUpSchedule(s);
  recordProvenance(s, dist);
  return s;
}

double TrainSetup::applySchedule(std::int64_t step) {
  const double value = schedule->lr(step);
  compat::setLearningRate(*parts.optimizer, value);
  if (auto m = schedule->momentum(step)) compat::setMomentum(*parts.optimizer, *m);
  return value;
}

std::string TrainSetup::table() const {
  auto rows = spec.rows();
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

CheckpointContent TrainSetup::checkpointContent() {
  CheckpointContent c;
  c.spec = &spec;
  c.data = data->info();
  c.parts = &parts;
  c.device = device;
  c.batch = BatchShape{microBatch, accumulate, globalBatch, stepsPerEpoch, lr};
  c.planned = plan.has_value();
  if (pruner) {
    c.widths = [this] { return widthsOf(mapChannels(*parts.model, pruner->input())); };
    c.reshape = [this](const Widths& w) {
      applyWidths(*parts.model, pruner->input(), w);
      reshapeParts(parts, spec, *dist, lr);
      recountFlops(*this, w);
    };
  }
  if (spec.compress.qatEpochs > 0) {
    c.qatGrids = [this] {
      std::vector<std::pair<double, std::int64_t>> out;
      if (fakeQuant)
        for (const ActivationGrid& g : fakeQuant->grids()) out.emplace_back(g.scale, g.zeroPoint);
      return out;
    };
    c.resumeQat = [this](const std::vector<std::pair<double, std::int64_t>>& saved) {
      std::vector<ActivationGrid> grids;
      for (const auto& [scale, zeroPoint] : saved) grids.push_back(ActivationGrid{scale, zeroPoint});
      resumeFakeQuant(*this, grids);
    };
  }
  return c;
}

RunInfo TrainSetup::runInfo(std::int64_t firstStep) const {
  RunInfo r;
  r.name = spec.name;
  r.epochs = spec.train.length.epochs;
  r.stepsPerEpoch = stepsPerEpoch;
  r.totalSteps = totalSteps;
  r.globalBatch = globalBatch;
  r.worldSize = trainLoader.worldSize;
  r.firstStep = firstStep;
  return r;
}

void TrainSetup::continueInNewSteps(Restored& r) const {
  TrainPosition& pos = r.standing.position;
  LoaderOptions count = trainLoader;  // the rest of the epoch, counted as setUpSchedule counts an epoch
  count.workers = 0;
  count.epoch = pos.epoch;
  count.startSample = pos.sample;
  const std::int64_t micro = BatchLoader(*data, Split::Train, count).numBatches();
  const std::int64_t steps = (micro + accumulate - 1) / accumulate;
  const std::int64_t done = std::max<std::int64_t>(0, stepsPerEpoch - steps);
  pos.step = (pos.epoch - 1) * stepsPerEpoch + done;
  r.standing.meters.steps = done;
  r.change->step = pos.step;
}

}  // namespace exprun
