// Purpose: a run's pruning steps and its end-of-run model comparison (see Compression.h).
#include "runner/train/Compression.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "runner/checkpoint/Export.h"
#include "runner/compress/Quantize.h"
#include "runner/metrics/Meters.h"
#include "runner/train/Evaluations.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

// Restores the default CPU generator's state on leaving: building a throwaway model (its
// initialisation draws numbers) leaves the run's random sequence as it was.
class KeepRandomState {
 public:
  KeepRandomState() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    state_ = gen_.get_state();
  }
  ~KeepRandomState() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(state_);
  }

 private:
  at::Generator gen_;
  torch::Tensor state_;
};

std::vector<std::int64_t> imageShape(const TrainSetup& s) {
  const DataInfo d = s.data->info();
  return {d.channels, d.height, d.width};
}

// A throwaway model of the spec at `widths` (full width when empty), on the CPU.
std::shared_ptr<Model> modelAt(const TrainSetup& s, const Widths& widths) {
  KeepRandomState keep;
  std::shared_ptr<Model> m = build<ModelKind>(s.spec.model, s.data->info());
  applyWidths(*m, imageShape(s), widths);
  return m;
}

std::int64_t weightBytes(Model& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel() * static_cast<std::int64_t>(p.element_size());
  for (const auto& b : m.buffers()) n += b.numel() * static_cast<std::int64_t>(b.element_size());
  return n;
}

Widths widthsNow(TrainSetup& s) { return s.pruner ? widthsOf(mapChannels(*s.parts.model, s.pruner->input())) : Widths{}; }

// FLOPs per image of one training step at `widths`, as exprun counts them (runner/metrics/Flops.h),
// on a throwaway model.
StepFlops flopsAt(const TrainSetup& s, const Widths& widths) {
  KeepRandomState keep;
  std::shared_ptr<Model> m = modelAt(s, widths);
  const auto shape = imageShape(s);
  return countStepFlops(*m, shape[0], shape[1], shape[2], [&](torch::Tensor x) { return m->forward(x); });
}

// Times a float model (fp32, evaluation mode) at batch 1 and 64 on the run's device.
void timeFloat(CompressedModel& row, Model& m, const TrainSetup& s) {
  const bool wasTraining = m.is_training();
  m.eval();
  const auto f = [&](torch::Tensor x) { return m.forward(x); };
  const bool cl = s.spec.train.numerics.channelsLast;
  row.imagesPerSB1 = inferenceImagesPerS(f, imageShape(s), 1, s.device, cl);
  row.imagesPerSB64 = inferenceImagesPerS(f, imageShape(s), 64, s.device, cl);
  if (wasTraining) m.train();
}

CompressedModel describe(const std::string& name, Model& m, double flops, double top1) {
  CompressedModel r;
  r.model = name;
  r.params = countParameters(m);
  r.flopsPerImage = flops;
  r.bytes = weightBytes(m);
  r.top1 = top1;
  return r;
}

// The int8 model: on quantization-aware fine-tuning's grids when it ran, else calibrated on the
// first batches of the training split in a fixed order (the same on every rank).
Int8Model quantized(TrainSetup& s) {
  if (s.fakeQuant) return Int8Model(*s.parts.model, s.fakeQuant->grids());
  LoaderOptions o = s.trainLoader;
  o.rank = 0;
  o.worldSize = 1;
  o.workers = 0;
  o.epoch = 1;
  o.startSample = 0;
  BatchLoader loader(*s.data, Split::Train, o);
  std::int64_t left = s.spec.compress.calibrationBatches;
  const auto next = [&]() -> std::optional<torch::Tensor> {
    if (left-- <= 0) return std::nullopt;
    auto b = loader.next();
    if (!b) return std::nullopt;
    return b->x;
  };
  return Int8Model(*s.parts.model, next, Int8Options{!cpuHasVnni()});
}

}  // namespace

double inferenceImagesPerS(const std::function<torch::Tensor(torch::Tensor)>& forward, const std::vector<std::int64_t>& shape,
                           std::int64_t batch, const torch::Device& device, bool channelsLast) {
  torch::NoGradGuard noGrad;
  std::vector<std::int64_t> dims{batch};
  dims.insert(dims.end(), shape.begin(), shape.end());
  torch::Tensor x = torch::randn(dims, torch::TensorOptions().device(device));
  if (channelsLast) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  const auto wait = [&](const torch::Tensor& y) {
    if (device.is_cuda()) (void)y.sum().item<double>();
  };
  for (int i = 0; i < 3; ++i) wait(forward(x));
  std::vector<double> times;
  double total = 0;
  while ((times.size() < 5 || total < 1.0) && times.size() < 500) {
    const Stopwatch watch;
    wait(forward(x));
    const double dt = watch.seconds();
    times.push_back(dt);
    total += dt;
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(batch) / times[times.size() / 2];
}

void recountFlops(TrainSetup& s, const Widths& widths) { s.flops = flopsAt(s, widths); }

std::int64_t qatFirstEpoch(const Spec& spec) {
  const std::int64_t n = spec.compress.qatEpochs;
  return n > 0 ? spec.train.length.epochs - n + 1 : 0;
}

void resumeFakeQuant(TrainSetup& s, const std::vector<ActivationGrid>& grids) {
  s.fakeQuant = std::make_unique<FakeQuantForward>(*s.parts.model, grids);
  const FakeQuantForward* f = s.fakeQuant.get();
  s.parts.forward = [f](const torch::Tensor& x) { return (*f)(x); };
}

void startFakeQuant(TrainSetup& s, Dist& dist, std::int64_t epoch) {
  const std::vector<ActivationGrid> grids = quantized(s).grids();
  resumeFakeQuant(s, grids);
  const double top1 = s.spec.train.evaluation.eval ? evaluate(s, dist).top1 : -1;
  log::info(strf("quantization-aware fine-tuning from epoch %lld: %zu activation grids calibrated on %lld batches; "
                 "batch norms frozen and folded; fake-quantized test Top-1 %s",
                 static_cast<long long>(epoch), grids.size(), static_cast<long long>(s.spec.compress.calibrationBatches),
                 top1 < 0 ? "-" : strf("%.2f %%", top1).c_str()));
}

PruneRecord pruneBeforeEpoch(TrainSetup& s, Dist& dist, int step, std::int64_t epoch, double top1Before) {
  PruneRecord r;
  r.step = step;
  r.epoch = epoch;
  r.top1Before = top1Before;
  r.paramsBefore = countParameters(*s.parts.model);
  const PruneOutcome o = s.pruner->prune(*s.parts.model, step, dist);
  reshapeParts(s.parts, s.spec, dist, s.lr);
  recountFlops(s, o.after);
  r.steps = o.steps;
  r.ratio = o.ratio;
  r.paramsAfter = countParameters(*s.parts.model);
  r.flopsBefore = o.flopsBefore;
  r.flopsAfter = o.flopsAfter;
  r.widths = o.after;
  if (s.spec.train.evaluation.eval) r.top1After = evaluate(s, dist).top1;
  log::info(strf("pruning step %d/%d before epoch %lld: %.1f %% of the channels of each group removed; "
                 "params %lld -> %lld, forward FLOPs/image %.3g -> %.3g (%.1f %% removed); test Top-1 %s -> %s",
                 r.step, r.steps, static_cast<long long>(epoch), 100 * r.ratio, static_cast<long long>(r.paramsBefore),
                 static_cast<long long>(r.paramsAfter), r.flopsBefore, r.flopsAfter,
                 100 * (1 - r.flopsAfter / s.pruner->fullWidthFlops()),
                 r.top1Before < 0 ? "-" : strf("%.2f %%", r.top1Before).c_str(),
                 r.top1After < 0 ? "-" : strf("%.2f %%", r.top1After).c_str()));
  return r;
}

std::vector<CompressedModel> compareModels(TrainSetup& s, Dist& dist, const ResultFile& result,
                                           const std::string& resultPath) {
  std::vector<CompressedModel> rows;
  const bool int8 = s.spec.compress.quantize == "int8";
  if (!s.pruner && !int8) return rows;
  const bool eval = s.spec.train.evaluation.eval;
  const Widths widths = widthsNow(s);
  // The models and their Top-1 first (evaluations are collective), then rank 0 times them alone.
  std::shared_ptr<Model> full;
  if (s.pruner) {
    full = modelAt(s, {});
    full->to(s.device);
    if (s.spec.train.numerics.channelsLast) weightsToChannelsLast(*full);
    rows.push_back(describe("fp32", *full, flopsAt(s, {}).forward,
                            result.prunes.empty() ? -1 : result.prunes.front().top1Before));
  }
  const double flops = flopsAt(s, widths).forward;
  Model& model = *s.parts.model;
  const auto floatForward = [&model](torch::Tensor x) { return model.forward(x); };  // not fake quantization's
  rows.push_back(describe(s.pruner ? "pruned fp32" : "fp32", model, flops, eval ? evaluate(s, dist, floatForward).top1 : -1));
  std::optional<Int8Model> q;
  const auto int8Forward = [&q](torch::Tensor x) {
    NoAutocast off(c10::DeviceType::CPU);
    return q->forward(x);
  };
  if (int8) {
    q.emplace(quantized(s));
    const std::string name = std::string(s.pruner ? "pruned int8" : "int8") + (s.fakeQuant ? " (QAT)" : "");
    rows.push_back(describe(name, model, flops, eval ? evaluate(s, dist, int8Forward).top1 : -1));
    rows.back().bytes = q->bytes();
  }
  if (s.spec.compress.benchmark && dist.rank() == 0) {
    std::size_t i = 0;
    if (full) timeFloat(rows[i++], *full, s);
    timeFloat(rows[i++], model, s);
    if (q) {
      rows[i].imagesPerSB1 = inferenceImagesPerS(int8Forward, imageShape(s), 1, s.device, false);
      rows[i].imagesPerSB64 = inferenceImagesPerS(int8Forward, imageShape(s), 64, s.device, false);
    }
  }
  if (q && dist.rank() == 0 && !resultPath.empty()) {
    const std::string out = resultPath.substr(0, resultPath.size() - 5) + ".int8.safetensors";
    writeSafetensors(out, q->tensors(),
                     {{"format", "exprun-int8"},
                      {"exprun_model", s.spec.model.type()},
                      {"exprun_engine", q->engine()},
                      {"exprun_reduce_range", cpuHasVnni() ? "false" : "true"},
                      {"exprun_qat", s.fakeQuant ? "true" : "false"},
                      {"exprun_widths", nlohmann::json(widths).dump()}});
    log::info("int8 weights: " + out);
  }
  dist.barrier();
  for (const auto& r : rows)
    log::info(strf("%-18s params %10lld  FLOPs/image %.3g  %8.2f MB  Top-1 %s  images/s batch 1: %.0f, batch 64: %.0f",
                   r.model.c_str(), static_cast<long long>(r.params), r.flopsPerImage, r.bytes / 1e6,
                   r.top1 < 0 ? "-" : strf("%.2f %%", r.top1).c_str(), r.imagesPerSB1, r.imagesPerSB64));
  return rows;
}

}  // namespace exprun
