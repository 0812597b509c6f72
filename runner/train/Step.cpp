// Purpose: one training step (see Step.h).
#include "runner/train/Step.h"

#include <cmath>

#include "runner/Compat.h"
#include "runner/Log.h"

namespace exprun {

torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), targets,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
}

namespace {

// L2 norm of all gradients together (what clip_grad_norm_ compares with its bound).
double gradNorm(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> norms;
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().detach().to(torch::kFloat32).norm());
  return norms.empty() ? 0.0 : torch::stack(norms).norm().item<double>();
}

}  // namespace

StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                          const std::vector<torch::Tensor>& params, double clipNorm, double clipValue,
                          std::optional<double> knownNorm) {
  StepOutcome r;
  r.stepped = scaler.unscale(params);
  if (r.stepped) {
    r.gradNorm = clipNorm > 0 ? torch::nn::utils::clip_grad_norm_(params, clipNorm)
                 : knownNorm  ? *knownNorm
                              : gradNorm(params);
    if (clipValue > 0) torch::nn::utils::clip_grad_value_(params, clipValue);
    optimizer.step();
  }
  scaler.update();
  return r;
}

void TrainStep::run(const std::function<Batch()>& next, std::int64_t group, std::int64_t step, std::int64_t epoch,
                    EpochMeters& meters, TrainPosition& position) {
  Model& model = *parts_.model;
  GradReducer& comm = *parts_.comm;
  if (comm.gradsAreViews())
    compat::zeroGradKeepStorage(*parts_.optimizer);  // gradients are views into the comm buckets
  else
    parts_.optimizer->zero_grad();
  const auto amp = autocastDtype(train_.precision);
  const std::int64_t bytesBefore = dist_.allreducedBytes();
  double stepLoss = 0;
  for (std::int64_t g = 0; g < group; ++g) {  // gradients accumulate locally; only the last is reduced
    Batch batch = next();
    torch::Tensor x = batch.x.to(device_, /*non_blocking=*/true), y = batch.y.to(device_, true);
    if (train_.channelsLast) x = x.contiguous(at::MemoryFormat::ChannelsLast);
    comm.setSync(g == group - 1);
    torch::Tensor out;
    {
      AutocastGuard autocast(device_.type(), amp);
      out = model.forward(x);
    }
    torch::Tensor loss = classificationLoss(out, y, train_.labelSmoothing);
    parts_.scaler->scale(loss / static_cast<double>(group)).backward();
    const std::int64_t n = y.size(0);
    const double l = loss.item<double>();
    stepLoss += l;
    meters.lossSum += l * n;
    meters.correct += out.argmax(1).eq(y).sum().item<std::int64_t>();
    meters.samples += n;
  }
  meters.commWait += comm.finish();
  meters.commBytes += dist_.allreducedBytes() - bytesBefore;
  std::optional<double> norm;  // fp32: computed once for the check and reused by the step
  if (parts_.scaler->enabled() || finiteEverywhere(stepLoss, step, epoch, norm)) {
    meters.normSum +=
        optimizerStep(*parts_.optimizer, *parts_.scaler, parts_.params, train_.clipGradNorm, train_.clipGradValue, norm)
            .gradNorm;
  } else {
    ++position.nonFiniteSkipped;
    log::warn(strf("step %lld: non-finite loss or gradients, step skipped (train.on_nonfinite: skip)",
                   static_cast<long long>(step + 1)));
  }
  if (parts_.ema && (step + 1) % train_.emaEvery == 0) parts_.ema->update(model);
}

bool TrainStep::finiteEverywhere(double stepLoss, std::int64_t step, std::int64_t epoch, std::optional<double>& norm) {
  norm = gradNorm(parts_.params);
  const bool finite = std::isfinite(*norm) && std::isfinite(stepLoss);
  const bool anyNonFinite = !dist_.active() ? !finite : dist_.max({finite ? 0.0 : 1.0})[0] > 0;
  if (!anyNonFinite) return true;
  if (train_.onNonFinite == NonFinitePolicy::Skip) return false;
  std::string first = "(on another rank)";
  for (const auto& p : parts_.model->named_parameters())
    if (p.value().grad().defined() && !torch::isfinite(p.value().grad()).all().item<bool>()) {
      first = "gradient of '" + p.key() + "'";
      break;
    }
  throw NonFiniteError(
      strf("train.on_nonfinite: abort: non-finite values at step %lld (epoch %lld): loss %g, first "
           "non-finite tensor: %s; nothing was applied (set train.on_nonfinite: skip to skip "
           "such steps)",
           static_cast<long long>(step + 1), static_cast<long long>(epoch), stepLoss, first.c_str()));
}

}  // namespace exprun
