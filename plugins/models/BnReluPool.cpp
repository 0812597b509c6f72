// Purpose: the fused batch norm -> ReLU -> 2x2 max-pool CPU kernel (see BnReluPool.h): the autograd
// Function and the per-channel arithmetic around the loops of BnReluPoolKernels.h.
#include "plugins/models/BnReluPool.h"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "plugins/models/BnReluPoolKernels.h"

namespace exprun {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
namespace k = exprun::kernels;

// An N x C x H x W activation, in either layout: NCHW (each channel a plane) or channels_last
// (each sample h x w positions of C channels; `nhwc`).
struct Geometry {
  std::int64_t n, c, h, w;
  bool nhwc;
  explicit Geometry(const torch::Tensor& x)
      : n(x.size(0)),
        c(x.size(1)),
        h(x.size(2)),
        w(x.size(3)),
        // as libtorch decides an output's layout (a one-channel channels_last input is contiguous too)
        nhwc(x.suggest_memory_format() == torch::MemoryFormat::ChannelsLast &&
             x.is_contiguous(torch::MemoryFormat::ChannelsLast)) {}
  k::PlaneShape plane() const { return {h, w}; }
  k::NhwcShape sample() const { return {h, w, c}; }
  std::int64_t in() const { return h * w; }                // positions of an input plane
  std::int64_t out() const { return (h / 2) * (w / 2); }   // positions of an output plane
  double count() const { return static_cast<double>(n * in()); }  // values per channel
  torch::Tensor emptyOutput(const torch::TensorOptions& o) const {
    return torch::empty({n, c, h / 2, w / 2},
                        o.memory_format(nhwc ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous));
  }
};

// Per-channel mean and biased variance of a training batch, in double.
void batchMoments(const Geometry& g, const float* x, std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(g.c, 0.0);
  var.assign(g.c, 0.0);
  if (!g.nhwc) {  // NCHW: two passes per channel, as libtorch's
    at::parallel_for(0, g.c, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c) {
        double sum = 0;
        for (std::int64_t n = 0; n < g.n; ++n) sum += k::sumOf(x + (n * g.c + c) * g.in(), g.in());
        const double mu = sum / g.count();
        double squares = 0;
        for (std::int64_t n = 0; n < g.n; ++n) squares += k::squaredDeviationsOf(x + (n * g.c + c) * g.in(), g.in(), mu);
        mean[c] = mu;
        var[c] = squares / g.count();
      }
    });
    return;
  }
  // channels_last: one pass, sums of (x - shift) per sample (shift = the first position's values),
  // added up in sample order, so that the result does not depend on the number of threads.
  const float* shift = x;
  std::vector<double> sums(g.n * g.c, 0.0), squares(g.n * g.c, 0.0);
  at::parallel_for(0, g.n, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      k::channelMoments(x + n * g.in() * g.c, g.sample(), shift, &sums[n * g.c], &squares[n * g.c]);
  });
  for (std::int64_t c = 0; c < g.c; ++c) {
    double s = 0, q = 0;
    for (std::int64_t n = 0; n < g.n; ++n) {
      s += sums[n * g.c + c];
      q += squares[n * g.c + c];
    }
    const double m = s / g.count();
    mean[c] = shift[c] + m;
    var[c] = std::max(0.0, q / g.count() - m * m);
  }
}

// max_pool(relu(x * scale + shift)) per channel, into out (and argmax bytes when not null).
void pool(const Geometry& g, const float* x, float* out, std::uint8_t* argmax, const std::vector<float>& scale,
          const std::vector<float>& shift) {
  if (g.nhwc) {
    at::parallel_for(0, g.n, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t n = begin; n < end; ++n)
        k::poolNhwc(x + n * g.in() * g.c, out + n * g.out() * g.c, argmax ? argmax + n * g.out() * g.c : nullptr,
                    g.sample(), scale.data(), shift.data());
    });
    return;
  }
  at::parallel_for(0, g.n * g.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t c = plane % g.c;
      k::poolPlane(x + plane * g.in(), out + plane * g.out(), argmax ? argmax + plane * g.out() : nullptr, g.plane(),
                   scale[c], shift[c]);
    }
  });
}

// Batch norm backward's per-channel sums over the positions that receive a gradient.
void gradientSums(const Geometry& g, const float* x, const float* gradOut, const std::uint8_t* argmax,
                  const double* mean, std::vector<double>& sumGrad, std::vector<double>& dot) {
  sumGrad.assign(g.c, 0.0);
  dot.assign(g.c, 0.0);
  if (!g.nhwc) {
    at::parallel_for(0, g.c, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t c = begin; c < end; ++c)
        for (std::int64_t n = 0; n < g.n; ++n) {
          const std::int64_t plane = n * g.c + c;
          k::gradientSums(x + plane * g.in(), gradOut + plane * g.out(), argmax + plane * g.out(), g.plane(), mean[c],
                          sumGrad[c], dot[c]);
        }
    });
    return;
  }
  std::vector<double> sums(g.n * g.c, 0.0), dots(g.n * g.c, 0.0);
  at::parallel_for(0, g.n, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t n = begin; n < end; ++n)
      k::gradientSumsNhwc(x + n * g.in() * g.c, gradOut + n * g.out() * g.c, argmax + n * g.out() * g.c, g.sample(),
                          mean, &sums[n * g.c], &dots[n * g.c]);
  });
  for (std::int64_t n = 0; n < g.n; ++n)
    for (std::int64_t c = 0; c < g.c; ++c) {
      sumGrad[c] += sums[n * g.c + c];
      dot[c] += dots[n * g.c + c];
    }
}

// gradIn = (dy - meanGrad - (x - mean) * proj) * scale per channel.
void inputGradient(const Geometry& g, const float* x, const float* gradOut, const std::uint8_t* argmax, float* gradIn,
                   const std::vector<float>& meanGrad, const std::vector<float>& mean, const std::vector<float>& proj,
                   const std::vector<float>& scale) {
  if (g.nhwc) {
    at::parallel_for(0, g.n, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t n = begin; n < end; ++n)
        k::inputGradientNhwc(x + n * g.in() * g.c, gradOut + n * g.out() * g.c, argmax + n * g.out() * g.c,
                             gradIn + n * g.in() * g.c, g.sample(), meanGrad.data(), mean.data(), proj.data(),
                             scale.data());
    });
    return;
  }
  at::parallel_for(0, g.n * g.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t c = plane % g.c;
      k::inputGradient(x + plane * g.in(), gradOut + plane * g.out(), argmax + plane * g.out(), gradIn + plane * g.in(),
                       g.plane(), meanGrad[c], mean[c], proj[c], scale[c]);
    }
  });
}

struct BnReluPoolFunction : public torch::autograd::Function<BnReluPoolFunction> {
  // Training mode: batch statistics; the running statistics move by `factor` (the module's
  // exponential average factor), the variance unbiased, as libtorch's batch_norm does.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, torch::Tensor runningMean, torch::Tensor runningVar,
                               double factor, double eps) {
    const Geometry g(x);
    std::vector<double> mean, var;
    batchMoments(g, x.data_ptr<float>(), mean, var);
    auto saved = torch::empty({2, g.c}, x.options().dtype(torch::kDouble));  // mean, invstd
    double* mp = saved.data_ptr<double>();
    double* ip = mp + g.c;
    const float* wp = weight.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* rm = runningMean.data_ptr<float>();
    float* rv = runningVar.data_ptr<float>();
    std::vector<float> scale(g.c), shift(g.c);
    for (std::int64_t c = 0; c < g.c; ++c) {
      mp[c] = mean[c];
      ip[c] = 1.0 / std::sqrt(var[c] + eps);
      rm[c] = static_cast<float>(factor * mean[c] + (1.0 - factor) * rm[c]);
      rv[c] = static_cast<float>(factor * (var[c] * g.count() / (g.count() - 1.0)) + (1.0 - factor) * rv[c]);
      scale[c] = static_cast<float>(ip[c]) * wp[c];
      shift[c] = bp[c] - static_cast<float>(mean[c]) * scale[c];
    }
    // Written through their data: their version counters move as batch_norm's in-place update's do.
    runningMean.unsafeGetTensorImpl()->bump_version();
    runningVar.unsafeGetTensorImpl()->bump_version();
    auto out = g.emptyOutput(x.options());
    auto argmax = g.emptyOutput(x.options().dtype(torch::kUInt8));
    pool(g, x.data_ptr<float>(), out.data_ptr<float>(), argmax.data_ptr<std::uint8_t>(), scale, shift);
    ctx->save_for_backward({x, weight, saved, argmax});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The gradients below are computed on raw data, without a graph of their own.
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "the fused batch norm -> ReLU -> max-pool kernel has no double backward (create_graph); "
                "set model.fused: false");
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const Geometry g(x);
    const torch::Tensor gradOut =
        grads[0].contiguous(g.nhwc ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous);
    const double* mp = saved[2].data_ptr<double>();
    const double* ip = mp + g.c;
    const float* xp = x.data_ptr<float>();
    const float* gp = gradOut.data_ptr<float>();
    const std::uint8_t* ap = saved[3].data_ptr<std::uint8_t>();
    std::vector<double> sumGrad, dot;
    gradientSums(g, xp, gp, ap, mp, sumGrad, dot);
    auto gradWeight = torch::empty_like(weight);
    auto gradBias = torch::empty_like(weight);
    const float* wp = weight.data_ptr<float>();
    std::vector<float> meanGrad(g.c), mean(g.c), proj(g.c), scale(g.c);
    for (std::int64_t c = 0; c < g.c; ++c) {
      gradWeight.data_ptr<float>()[c] = static_cast<float>(dot[c] * ip[c]);
      gradBias.data_ptr<float>()[c] = static_cast<float>(sumGrad[c]);
      // grad_x = (dy - mean(dy) - (x - mean) * proj) * invstd * weight, proj = dot * invstd^2 / count.
      meanGrad[c] = static_cast<float>(sumGrad[c] / g.count());
      proj[c] = static_cast<float>(dot[c] * ip[c] * ip[c] / g.count());
      mean[c] = static_cast<float>(mp[c]);
      scale[c] = static_cast<float>(ip[c]) * wp[c];
    }
    auto gradIn = torch::empty_like(x);
    inputGradient(g, xp, gp, ap, gradIn.data_ptr<float>(), meanGrad, mean, proj, scale);
    return {gradIn, gradWeight, gradBias, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Evaluation with the running statistics, nothing kept for a backward pass.
torch::Tensor evaluate(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn) {
  const Geometry g(x);
  const float* wp = bn.weight.data_ptr<float>();
  const float* bp = bn.bias.data_ptr<float>();
  const float* rm = bn.running_mean.data_ptr<float>();
  const float* rv = bn.running_var.data_ptr<float>();
  const auto eps = static_cast<float>(bn.options.eps());
  std::vector<float> scale(g.c), shift(g.c);
  for (std::int64_t c = 0; c < g.c; ++c) {
    scale[c] = 1.0f / std::sqrt(rv[c] + eps) * wp[c];
    shift[c] = bp[c] - rm[c] * scale[c];
  }
  auto out = g.emptyOutput(x.options());
  pool(g, x.data_ptr<float>(), out.data_ptr<float>(), nullptr, scale, shift);
  return out;
}

bool wantsGrad(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn) {
  return torch::GradMode::is_enabled() &&
         (x.requires_grad() || bn.weight.requires_grad() || bn.bias.requires_grad());
}

}  // namespace

bool bnReluPoolFuses(const torch::Tensor& x, const torch::nn::BatchNorm2dImpl& bn) {
  const auto& o = bn.options;
  if (!x.device().is_cpu() || x.scalar_type() != torch::kFloat || x.dim() != 4) return false;
  if (!x.is_contiguous() && !x.is_contiguous(torch::MemoryFormat::ChannelsLast)) return false;
  for (const torch::Tensor* t : {&bn.weight, &bn.bias, &bn.running_mean, &bn.running_var})
    if (!t->defined() || t->scalar_type() != torch::kFloat || !t->device().is_cpu() || !t->is_contiguous()) return false;
  if (!o.affine() || !o.track_running_stats() || x.size(2) < 2 || x.size(3) < 2 || x.size(1) != o.num_features())
    return false;
  if (bn.is_training()) return x.size(0) * x.size(2) * x.size(3) > 1;  // else libtorch's error
  return !wantsGrad(x, bn);
}

torch::Tensor bnReluPool(const torch::Tensor& x, torch::nn::BatchNorm2dImpl& bn) {
  if (!bnReluPoolFuses(x, bn)) return torch::max_pool2d(torch::relu(bn.forward(x)), 2);
  if (!bn.is_training()) return evaluate(x, bn);
  // BatchNormImplBase::forward's bookkeeping: the batch counter and the average factor.
  double factor = 0.0;
  {
    torch::NoGradGuard noGrad;
    bn.num_batches_tracked += 1;
    factor = bn.options.momentum() ? *bn.options.momentum()
                                   : 1.0 / static_cast<double>(bn.num_batches_tracked.item<std::int64_t>());
  }
  return BnReluPoolFunction::apply(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, factor, bn.options.eps());
}

}  // namespace exprun
