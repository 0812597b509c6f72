// Purpose: synchronized batch norm (see SyncBatchNorm.h), as PyTorch's SyncBatchNorm computes it:
// forward batch_norm_stats -> all ranks' sums -> batch_norm_elemt; backward batch_norm_backward_reduce
// -> the sums of dy and dy * x̂ over the ranks -> batch_norm_backward_elemt.
#include "runner/nn/SyncBatchNorm.h"

#include <chrono>

namespace exprun {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct SyncNorm : torch::autograd::Function<SyncNorm> {
  // x [N, C, H, W]; weight, bias [C]; mean, invstd [C] (float32, global: computed by the caller);
  // count: all ranks' values per channel, a 0-dim float64 tensor on x's device (never read on the host).
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                               torch::Tensor mean, torch::Tensor invstd, torch::Tensor count, Dist* dist,
                               SyncCost* cost) {
    const torch::ScalarType t = normMathType(x);
    const torch::Tensor xf = x.to(t);
    const torch::Tensor xhat = (xf - mean.view({1, -1, 1, 1})) * invstd.view({1, -1, 1, 1});
    torch::Tensor y = xhat;
    if (weight.defined()) y = y * weight.to(t).view({1, -1, 1, 1});
    if (bias.defined()) y = y + bias.to(t).view({1, -1, 1, 1});
    ctx->save_for_backward({xhat, weight, invstd, count});
    ctx->saved_data["dist"] = reinterpret_cast<std::int64_t>(dist);
    ctx->saved_data["cost"] = reinterpret_cast<std::int64_t>(cost);
    ctx->saved_data["bias"] = bias.defined();
    return y.to(x.scalar_type());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& xhat = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& invstd = saved[2];
    const torch::Tensor& count = saved[3];
    Dist* dist = reinterpret_cast<Dist*>(ctx->saved_data["dist"].toInt());
    SyncCost* cost = reinterpret_cast<SyncCost*>(ctx->saved_data["cost"].toInt());
    const torch::Tensor g = grads[0].to(xhat.scalar_type());
    const std::vector<std::int64_t> dims{0, 2, 3};
    const torch::Tensor sumDy = g.sum(dims), sumDyXhat = (g * xhat).sum(dims);  // this rank's
    torch::Tensor both = torch::cat({sumDy, sumDyXhat});
    sumOverRanks(*dist, both, cost);
    const std::int64_t c = sumDy.size(0);
    const torch::Tensor meanDy = both.narrow(0, 0, c) / count, meanDyXhat = both.narrow(0, c, c) / count;
    torch::Tensor scale = invstd;
    if (weight.defined()) scale = scale * weight.to(xhat.scalar_type());
    const torch::Tensor gx = (g - meanDy.view({1, -1, 1, 1}) - xhat * meanDyXhat.view({1, -1, 1, 1})) *
                             scale.view({1, -1, 1, 1});
    torch::Tensor gw, gb;
    if (weight.defined()) gw = sumDyXhat.to(weight.scalar_type());
    if (ctx->saved_data["bias"].toBool()) gb = sumDy.to(weight.defined() ? weight.scalar_type() : xhat.scalar_type());
    return {gx.to(grads[0].scalar_type()), gw, gb, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor SyncBatchNorm2dImpl::forwardAct(const torch::Tensor& x, const torch::Tensor& z, BnActivation act) {
  const bool hooked = branch_ && z.defined() && is_training();
  if (fused_ && !hooked && bnActFusable(x, z, *this, host_))
    return fusedBnAct(x, z, *this, act, is_training() ? dist_ : nullptr, cost_, host_);
  torch::Tensor out = normalise(x);
  if (hooked) out = branch_(out);
  if (z.defined()) out += z;
  if (act == BnActivation::Relu) out.relu_();
  if (act == BnActivation::Relu6) torch::relu6_(out);
  return out;
}

torch::Tensor SyncBatchNorm2dImpl::normalise(const torch::Tensor& input) {
  if (!dist_ || !is_training()) return torch::nn::BatchNorm2dImpl::forward(input);
  // The running statistics' momentum, as BatchNorm's forward chooses it.
  double factor = options.momentum().value_or(0.0);
  if (options.track_running_stats() && num_batches_tracked.defined()) {
    num_batches_tracked += 1;
    if (!options.momentum()) factor = 1.0 / num_batches_tracked.item<double>();
  }
  // Every rank's per-channel sums, sums of squares and counts, in float64: the global statistics.
  const std::vector<std::int64_t> dims{0, 2, 3};
  torch::Tensor stats;
  {
    torch::NoGradGuard noGrad;
    const torch::Tensor x64 = input.detach().to(torch::kDouble);
    const double n = static_cast<double>(input.numel() / input.size(1));
    stats = torch::cat({x64.sum(dims), (x64 * x64).sum(dims), torch::full({1}, n, x64.options())});
  }
  sumOverRanks(*dist_, stats, cost_);
  const std::int64_t c = input.size(1);
  const torch::Tensor count = stats[2 * c];  // 0-dim, on the device: no host read in the step
  const torch::Tensor mean = stats.narrow(0, 0, c) / count;
  const torch::Tensor var = (stats.narrow(0, c, c) / count - mean * mean).clamp_min(0);  // biased, for normalising
  if (options.track_running_stats()) {
    torch::NoGradGuard noGrad;
    running_mean.mul_(1 - factor).add_(mean.to(running_mean.scalar_type()), factor);
    running_var.mul_(1 - factor).add_((var * unbiasing(count)).to(running_var.scalar_type()), factor);
  }
  const torch::Tensor invstd = (var + options.eps()).rsqrt().to(normMathType(input));
  return SyncNorm::apply(input, options.affine() ? weight : torch::Tensor(), options.affine() ? bias : torch::Tensor(),
                         mean.to(normMathType(input)), invstd, count, dist_, cost_);
}

torch::Tensor unbiasing(const torch::Tensor& count) { return count / (count - 1).clamp_min(1); }

void sumOverRanks(Dist& dist, torch::Tensor& t, SyncCost* cost) {
  const auto start = std::chrono::steady_clock::now();
  dist.sumInPlace(t);
  if (!cost) return;
  cost->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  cost->allreduces += 1;
  cost->bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
}

std::vector<SyncBatchNorm2dImpl*> syncBatchNorms(torch::nn::Module& model) {
  std::vector<SyncBatchNorm2dImpl*> out;
  if (auto* self = dynamic_cast<SyncBatchNorm2dImpl*>(&model)) out.push_back(self);
  // Not include_self: a model's constructor asks before it is held by a shared_ptr.
  for (const auto& m : model.modules(/*include_self=*/false))
    if (auto* bn = dynamic_cast<SyncBatchNorm2dImpl*>(m.get())) out.push_back(bn);
  return out;
}

}  // namespace exprun
