// Purpose: one training step (see Step.h).
#include "runner/step/Step.h"

#include <cmath>

#include "runner/api/Optimizer.h"
#include "runner/metrics/Phases.h"
#include "runner/step/Feed.h"
#include "runner/util/Compat.h"
#include "runner/util/Log.h"

namespace exprun {

torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), targets.is_floating_point() ? targets.to(torch::kFloat32) : targets,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
}

namespace {

// The gradients of the parameters that have one, in float32 (a no-op for float32 gradients).
std::vector<torch::Tensor> gradsFloat(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad().detach().to(torch::kFloat32));
  return grads;
}

// The L2 norm of each gradient (of the parameters that have one), in float32: one multi-tensor
// call (on CUDA a few launches for all parameters; on the CPU the per-tensor norm, the same bits).
std::vector<torch::Tensor> gradNorms(const std::vector<torch::Tensor>& params) {
  const std::vector<torch::Tensor> grads = gradsFloat(params);
  return grads.empty() ? grads : at::_foreach_norm(grads, 2);
}

// The L2 norm of all gradients together (what clip_grad_norm_ compares with its bound); under
// sharding `overRanks` makes it every rank's shards' (the square root of the sum of squares).
torch::Tensor totalNorm(const std::vector<torch::Tensor>& norms, const torch::Device& device, Dist* overRanks) {
  torch::Tensor local =
      norms.empty() ? torch::zeros({}, torch::TensorOptions().device(device)) : torch::stack(norms).norm();
  if (!overRanks) return local;
  torch::Tensor squares = local.to(torch::kFloat64).square();
  overRanks->sumInPlace(squares);
  return squares.sqrt().to(local.scalar_type());
}

// LibTorch's clip_grad_norm_ (L2), without the host read of its result: the norm stays a tensor.
// Multi-tensor norms and scaling (clip_grad_norm_'s own arithmetic, the same bits on the CPU).
// `knownNorm`: the total norm the step computed already from float32 gradients (the non-finite
// check's), taken when every gradient is float32 (the same bits as computing it again here).
torch::Tensor clipGradNorm(const std::vector<torch::Tensor>& params, double maxNorm, const torch::Tensor& knownNorm,
                           Dist* overRanks) {
  std::vector<torch::Tensor> grads;
  bool float32 = true;
  for (const auto& p : params)
    if (p.grad().defined()) {
      grads.push_back(p.grad().data());
      float32 = float32 && p.grad().scalar_type() == torch::kFloat32;
    }
  if (grads.empty()) return {};
  torch::Tensor total;
  if (knownNorm.defined() && float32 && (grads.size() > 1 || overRanks)) {
    total = knownNorm;
  } else if (overRanks) {
    total = totalNorm(at::_foreach_norm(grads, 2.0), params.front().device(), overRanks);
  } else {
    const std::vector<torch::Tensor> norms = at::_foreach_norm(grads, 2.0);
    total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2.0);
  }
  torch::Tensor coef = torch::clamp(maxNorm / (total + 1e-6), std::nullopt, 1.0);
  at::_foreach_mul_(grads, coef);
  return total;
}

// The gradients' L2 norm before clipping (`knownNorm` when the caller has it), then clipping by
// norm and by value as the rules ask.
torch::Tensor normThenClip(const std::vector<torch::Tensor>& params, double clipNorm, double clipValue,
                           const torch::Tensor& knownNorm, Dist* overRanks) {
  const torch::Device device = params.empty() ? torch::Device(torch::kCPU) : params.front().device();
  torch::Tensor norm = clipNorm > 0           ? clipGradNorm(params, clipNorm, knownNorm, overRanks)
                       : knownNorm.defined() ? knownNorm
                                             : totalNorm(gradNorms(params), device, overRanks);
  if (clipValue > 0) torch::nn::utils::clip_grad_value_(params, clipValue);
  return norm;
}

}  // namespace

StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler, const std::vector<torch::Tensor>& params,
                          double clipNorm, double clipValue, const torch::Tensor& knownNorm,
                          const std::function<void()>& beforeUpdate, Dist* overRanks) {
  StepOutcome r;
  auto* skipper = dynamic_cast<SkipsOnDevice*>(&optimizer);
  if (scaler.enabled() && skipper && skipper->canSkipOnDevice()) {
    // fp16 without a host read: the optimizer's kernel skips the step when found_inf says so, as
    // torch.optim's fused SGD does under GradScaler; the norm of a skipped step counts as 0, as the
    // host's decision adds none.
    scaler.unscaleOnDevice(params, overRanks);
    scaler.countDeviceSkip();
    if (beforeUpdate) beforeUpdate();
    const torch::Tensor norm = normThenClip(params, clipNorm, clipValue, knownNorm, overRanks);
    struct Unflag {  // the flag is the next step's only, even if this one throws
      SkipsOnDevice* s;
      ~Unflag() { s->skipWhen(torch::Tensor()); }
    } unflag{skipper};
    skipper->skipWhen(scaler.foundInf());
    optimizer.step();
    const torch::Tensor skipped = scaler.foundInf().reshape({}) > 0;
    if (norm.defined()) r.gradNorm = torch::where(skipped, torch::zeros_like(norm), norm);
    r.stepped = true;  // as far as the host knows
    scaler.update();
    return r;
  }
  r.stepped = scaler.unscale(params, overRanks);
  if (r.stepped) {
    if (beforeUpdate) beforeUpdate();
    r.gradNorm = normThenClip(params, clipNorm, clipValue, knownNorm, overRanks);
    optimizer.step();
  }
  scaler.update();
  return r;
}

EpochTotals totalsOverRanks(const EpochMeters& m, Dist& dist) {
  EpochTotals t{m.lossSum,   static_cast<double>(m.correct), static_cast<double>(m.samples),
                static_cast<double>(m.skippedImages), m.elapsed, m.dataWait, m.commWait,
                static_cast<double>(m.commBytes)};
  dist.maxInPlace({&t.elapsed, &t.dataWait, &t.commWait, &t.commBytes});
  dist.sumInPlace({&t.lossSum, &t.correct, &t.samples, &t.skippedImages});
  return t;
}

StepSums StepSums::from(const EpochMeters& m, const torch::Device& device) {
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  return StepSums{torch::full({}, m.lossSum, f64), torch::full({}, m.correct, f64.dtype(torch::kInt64)),
                  torch::full({}, m.normSum, f64)};
}

void StepSums::into(EpochMeters& m) const {
  m.lossSum = lossSum.item<double>();
  m.correct = correct.item<std::int64_t>();
  m.normSum = normSum.item<double>();
}

TrainStep::TrainStep(Learner& learner, const Numerics& numerics, const StepRules& rules, Dist& dist,
                     const torch::Device& device, Methods* methods)
    : learner_(learner),
      numerics_(numerics),
      rules_(rules),
      dist_(dist),
      device_(device),
      methods_(methods && !methods->empty() ? methods : nullptr),
      defer_(device.is_cuda()) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  badStep_ = torch::full({}, -1, i64);
  badEpoch_ = torch::zeros({}, i64);
  badLoss_ = torch::zeros({}, i64.dtype(torch::kFloat64));
  badParam_ = torch::full({}, -1, i64);
  stepNow_ = torch::zeros({}, i64);
  epochNow_ = torch::zeros({}, i64);
}

void TrainStep::useCudaGraph() { graph_ = std::make_unique<StepGraph>(learner_, device_); }

// Micro-batch `g` of `group`: its batch on the device, the methods' hooks, the autocast forward,
// the loss and the scaled backward (reduced over ranks after the last); its loss and samples added
// to `acc` and the epoch's sums.
void TrainStep::microBatch(const std::function<Batch()>& next, std::int64_t g, std::int64_t group, std::int64_t step,
                           std::int64_t epoch, StepSums& sums, EpochMeters& meters, MicroSums& acc) {
  StepBatch b = fetch(next, g, step, epoch);
  compute(b, group, sums.lossSum, sums.correct, meters, acc);
}

StepBatch TrainStep::fetch(const std::function<Batch()>& next, std::int64_t g, std::int64_t step, std::int64_t epoch) {
  Batch batch;
  {
    PhaseScope waiting(Phase::DataWait);
    batch = next();
  }
  StepBatch b;
  if (batch.x.device() == device_ && !batch.bytes()) {  // the feed's (DeviceFeed): placed and normalised there
    b.x = batch.x;
    b.y = batch.y;
  } else {
    PhaseScope copying(Phase::Copy);
    Batch placed = placedOn(std::move(batch), device_, numerics_.channelsLast);
    b.x = placed.x;
    b.y = placed.y;
  }
  b.step = step;
  b.epoch = epoch;
  b.micro = g;
  return b;
}

void TrainStep::compute(StepBatch& b, std::int64_t group, const torch::Tensor& lossSum, const torch::Tensor& correct,
                        EpochMeters& meters, MicroSums& acc) {
  Model& model = *learner_.model;
  if (methods_) methods_->onBatch(b);
  learner_.reducer->setSync(b.micro == group - 1);
  torch::Tensor out, loss;
  {
    PhaseScope forward(Phase::Forward);
    {
      AutocastGuard autocast(device_.type(), autocastDtype(numerics_.precision));
      out = methods_ ? methods_->forward(b.x, model) : model.forward(b.x);
    }
    loss = learner_.task->loss(out, b.y, b.soft, rules_.labelSmoothing);
    if (methods_) loss = methods_->loss(loss, out, b);
  }
  {
    PhaseScope backward(Phase::Backward);
    learner_.scaler->scale(loss / static_cast<double>(group)).backward();
  }
  const std::int64_t n = learner_.task->units(b.y);  // samples, or tokens
  const torch::Tensor l = loss.detach().to(torch::kFloat64);
  acc.loss.add_(l);
  const torch::Tensor summed = l * n;
  lossSum.add_(summed);
  acc.lossSum.add_(summed);
  acc.samples += n;
  correct.add_(learner_.task->correct(out, b.labels()));
  meters.samples += n;
}

void TrainStep::zeroGrads() {
  PhaseScope zeroing(Phase::Optimizer);
  if (graph_) {  // in place, in one multi-tensor launch: the gradients keep their addresses
    std::vector<torch::Tensor> grads;
    for (const auto& p : learner_.params)
      if (p.grad().defined()) grads.push_back(p.grad());
    if (!grads.empty()) at::_foreach_zero_(grads);
  } else if (learner_.reducer->sharded()) {
    learner_.reducer->zeroModelGrads();  // the shards' gradients are overwritten by the reduce-scatter
  } else if (learner_.reducer->gradsAreViews()) {
    compat::zeroGradKeepStorage(learner_.optimizer->torchOptimizer());  // gradients are views into the comm buckets
  } else {
    learner_.optimizer->torchOptimizer().zero_grad();
  }
}

void TrainStep::run(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
                    StepSums& sums, EpochMeters& meters, TrainPosition& position) {
  if (graph_) return runGraphed(next, group, step, epoch, sums, meters, position);
  zeroGrads();
  const std::int64_t bytesBefore = dist_.allreducedBytes();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  MicroSums acc{torch::zeros({}, f64), torch::zeros({}, f64)};
  for (std::int64_t g = 0; g < group; ++g)  // gradients accumulate locally; only the last is reduced
    microBatch(next, g, group, step, epoch, sums, meters, acc);
  finish(acc, bytesBefore, step, epoch, sums.normSum, meters, position);
  afterOptimizer(step);
}

void TrainStep::finish(MicroSums& acc, std::int64_t bytesBefore, std::int64_t step, std::int64_t epoch,
                       const torch::Tensor& normSum, EpochMeters& meters, TrainPosition& position) {
  GradReducer& reducer = *learner_.reducer;
  {
    std::optional<PhaseScope> exchanging;  // a single process exchanges nothing
    if (dist_.active()) exchanging.emplace(Phase::Comm);
    meters.commWait += reducer.finish();
  }
  meters.commInFlight += reducer.inFlightSeconds();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  lastLoss_ = torch::stack({acc.lossSum, torch::full({}, static_cast<double>(acc.samples), f64)});
  torch::Tensor norm;  // fp32: computed once for the check and reused by the step
  PhaseScope optimizing(Phase::Optimizer);
  if (learner_.scaler->enabled() || finiteEverywhere(acc.loss, step, epoch, norm)) {
    std::function<void()> beforeUpdate;
    if (methods_) beforeUpdate = [this, step] { methods_->beforeOptimizerStep(step); };
    const StepOutcome r = optimizerStep(learner_.optimizer->torchOptimizer(), *learner_.scaler, learner_.params, rules_.clipGradNorm,
                                        rules_.clipGradValue, norm, beforeUpdate, shardedOver());
    if (r.gradNorm.defined()) normSum.add_(r.gradNorm.to(torch::kFloat64));
    {
      std::optional<PhaseScope> gathering;
      if (learner_.reducer->sharded()) gathering.emplace(Phase::Comm);
      learner_.reducer->gatherParameters();  // every rank's stepped rows (sharding; nothing otherwise)
    }
  } else {
    ++position.nonFiniteSkipped;
    log::warn(strf("step %lld: non-finite loss or gradients, step skipped (train.on_nonfinite: skip)",
                   static_cast<long long>(step + 1)));
  }
  meters.commBytes += dist_.allreducedBytes() - bytesBefore;  // the gradients' exchange and sharding's gather
}

void TrainStep::afterOptimizer(std::int64_t step) {
  if (learner_.ema && (step + 1) % rules_.emaEvery == 0) {
    PhaseScope averaging(Phase::Ema);
    learner_.ema->update(*learner_.model);
  }
  if (methods_) methods_->afterOptimizerStep(step);
}

// The step with train.cuda_graph: the micro-batches fetched first (the graph reads them from its
// buffers), then replayed, captured and replayed, or run eagerly (warm-up, other shapes).
void TrainStep::runGraphed(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
                           StepSums& sums, EpochMeters& meters, TrainPosition& position) {
  std::vector<StepBatch> batches;
  for (std::int64_t g = 0; g < group; ++g) batches.push_back(fetch(next, g, step, epoch));
  graph_->setLearningRates();
  if (!learner_.scaler->enabled() && rules_.onNonFinite == NonFinitePolicy::Abort) {  // what the deferred check records
    stepNow_.fill_(step);
    epochNow_.fill_(epoch);
  }
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  // The whole step over `bs`, its sums into `lossSum`, `correct` and `normSum`.
  auto work = [&](std::vector<StepBatch>& bs, const torch::Tensor& lossSum, const torch::Tensor& correct,
                  const torch::Tensor& normSum, EpochMeters& m, TrainPosition& p) {
    zeroGrads();
    MicroSums acc{torch::zeros({}, f64), torch::zeros({}, f64)};
    for (auto& b : bs) compute(b, group, lossSum, correct, m, acc);
    finish(acc, dist_.allreducedBytes(), step, epoch, normSum, m, p);
  };
  const StepGraph::Plan plan = graph_->plan(batches);
  if (plan == StepGraph::Plan::Eager) {
    graph_->eager(batches, [&] { work(batches, sums.lossSum, sums.correct, sums.normSum, meters, position); });
  } else {
    PhaseScope replaying(Phase::Graph);
    if (plan == StepGraph::Plan::Capture)
      graph_->capture(batches, [&](std::vector<StepBatch>& in, StepGraph::Outputs& out) {
        out.lossSum.zero_();
        out.correct.zero_();
        out.normSum.zero_();
        EpochMeters scratch;  // the host's counts are added at every replay
        TrainPosition unused;
        work(in, out.lossSum, out.correct, out.normSum, scratch, unused);
        out.lastLoss.copy_(lastLoss_);  // a static output: the graph's own memory is not read outside it
      });
    graph_->replay(batches);
    const StepGraph::Outputs& out = graph_->outputs();
    sums.lossSum.add_(out.lossSum);
    sums.correct.add_(out.correct);
    sums.normSum.add_(out.normSum);
    lastLoss_ = out.lastLoss.clone();  // the next replay overwrites the graph's
    for (const auto& b : batches) meters.samples += b.y.size(0);
  }
  afterOptimizer(step);
}

bool TrainStep::finiteEverywhere(const torch::Tensor& stepLoss, std::int64_t step, std::int64_t epoch,
                                 torch::Tensor& norm) {
  const std::vector<torch::Tensor> norms = gradNorms(learner_.params);
  norm = totalNorm(norms, device_, shardedOver());
  torch::Tensor bad = torch::logical_or(torch::isfinite(norm).logical_not(), torch::isfinite(stepLoss).logical_not())
                          .to(torch::kFloat32);
  if (dist_.active()) dist_.maxInPlace(bad);  // every rank's verdict, without leaving the device
  const bool abort = rules_.onNonFinite == NonFinitePolicy::Abort;
  if (defer_ && abort) {  // recorded on the device, reported by verify()
    // A gradient is non-finite where its norm is; a parameter without one is finite (norm 0).
    std::vector<torch::Tensor> perParam;
    std::size_t k = 0;
    for (const auto& p : learner_.params)
      perParam.push_back(p.grad().defined() ? norms[k++] : torch::zeros({}, torch::TensorOptions().device(device_)));
    torch::Tensor nonFinite = torch::isfinite(torch::stack(perParam)).logical_not();
    torch::Tensor localParam = torch::where(nonFinite.any(), nonFinite.to(torch::kInt64).argmax(), -1);
    // In place (with train.cuda_graph from the device's step and epoch): a captured step records the
    // replayed step into the same tensors.
    torch::Tensor first = torch::logical_and(bad > 0, badStep_ < 0);
    badStep_.copy_(graph_ ? torch::where(first, stepNow_, badStep_) : torch::where(first, step, badStep_));
    badEpoch_.copy_(graph_ ? torch::where(first, epochNow_, badEpoch_) : torch::where(first, epoch, badEpoch_));
    badLoss_.copy_(torch::where(first, stepLoss, badLoss_));
    badParam_.copy_(torch::where(first, localParam, badParam_));
    return true;
  }
  if (bad.item<float>() == 0) return true;
  if (!abort) return false;
  throw NonFiniteError(strf("train.on_nonfinite: abort: non-finite values at step %lld (epoch %lld): loss %g, first "
                            "non-finite tensor: %s; nothing was applied (set train.on_nonfinite: skip to skip such steps)",
                            static_cast<long long>(step + 1), static_cast<long long>(epoch), stepLoss.item<double>(),
                            firstNonFiniteTensor(torch::Tensor()).c_str()));
}

std::string TrainStep::firstNonFiniteTensor(const torch::Tensor& badParam) const {
  std::vector<std::string> names;
  for (const auto& p : learner_.model->named_parameters())
    if (p.value().requires_grad()) names.push_back(p.key());
  if (badParam.defined()) {  // recorded on the device
    const std::int64_t i = badParam.item<std::int64_t>();
    return i >= 0 && i < static_cast<std::int64_t>(names.size()) ? "gradient of '" + names[i] + "'" : "(on another rank)";
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    const torch::Tensor& g = learner_.params[i].grad();
    if (g.defined() && !torch::isfinite(g).all().item<bool>()) return "gradient of '" + names[i] + "'";
  }
  return "(on another rank)";
}

void TrainStep::verify(std::int64_t now) {
  const std::int64_t step = badStep_.item<std::int64_t>();
  if (step < 0) return;
  throw NonFiniteError(strf("train.on_nonfinite: abort: non-finite values at step %lld (epoch %lld): loss %g, first "
                            "non-finite tensor: %s; found at step %lld (on a GPU the check is read at log lines, "
                            "checkpoints and the epoch's end, so the steps up to it were applied; no checkpoint holds "
                            "them) (set train.on_nonfinite: skip to skip such steps)",
                            static_cast<long long>(step + 1), static_cast<long long>(badEpoch_.item<std::int64_t>()),
                            badLoss_.item<double>(), firstNonFiniteTensor(badParam_).c_str(),
                            static_cast<long long>(now)));
}

}  // namespace exprun
