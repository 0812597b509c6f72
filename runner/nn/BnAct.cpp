// Purpose: the fused batch norm + residual add + activation (BnAct.h): the statistics, the autograd
// function, and its five steps on either backend: the CUDA kernels (BnActKernels.cu) or ATen ops on
// CPU tensors, which compute the same formulas and are what the tests check the kernels against.
#include "runner/nn/BnAct.h"

#include "runner/dist/Dist.h"
#include "runner/nn/SyncBatchNorm.h"

#if defined(EXPRUN_WITH_CUDA_KERNELS)
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runner/nn/BnActKernels.h"
#include "runner/nn/CudaArch.h"
#endif

namespace exprun {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// x [N, C, H, W] as the [N·H·W, C] matrix the kernels read (a view when x is channels_last).
torch::Tensor rowsOf(const torch::Tensor& x) { return x.permute({0, 2, 3, 1}).reshape({-1, x.size(1)}); }
// A [N·H·W, C] matrix back as a tensor shaped like x (channels_last strides).
torch::Tensor likeInput(const torch::Tensor& rows, const torch::Tensor& x) {
  return rows.view({x.size(0), x.size(2), x.size(3), x.size(1)}).permute({0, 3, 1, 2});
}

// Whether the gradient passes at output y (ATen's relu/hardtanh backward), as a 0/1 mask.
torch::Tensor passMask(const torch::Tensor& y, BnActivation act) {
  if (act == BnActivation::Relu) return (y <= 0).logical_not();
  return (y <= 0).logical_or(y >= 6).logical_not();
}

// Whether the kernels take x's element type.
bool kernelDtype(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return t == torch::kFloat || t == torch::kHalf || t == torch::kBFloat16;
}

#if defined(EXPRUN_WITH_CUDA_KERNELS)
// The kernels a step on x runs: CUDA's for a CUDA tensor; for a CPU tensor of a type they take, the
// caller's `host` table (may be null: ATen's ops).
const bnact::Kernels* kernelsFor(const torch::Tensor& x, const bnact::Kernels* host) {
  static const bnact::Kernels cuda{&bnact::scratchFloats, &bnact::stats,        &bnact::finalize,
                                   &bnact::apply,         &bnact::backwardSums, &bnact::backwardApply, 0};
  if (x.is_cuda()) return ownKernelsRunOn(x.get_device()) ? &cuda : nullptr;  // else ATen's ops
  return x.is_cpu() && kernelDtype(x) ? host : nullptr;
}
// The launches go to x's device, whichever is current (nothing for a CPU tensor).
std::optional<c10::Device> deviceOf(const torch::Tensor& x) {
  return x.is_cuda() ? std::optional<c10::Device>(x.device()) : std::nullopt;
}
bnact::Dtype kernelType(const torch::Tensor& x) {
  switch (x.scalar_type()) {
    case torch::kFloat: return bnact::Dtype::F32;
    case torch::kHalf: return bnact::Dtype::F16;
    case torch::kBFloat16: return bnact::Dtype::BF16;
    default: TORCH_CHECK(false, "fused batch norm: no kernel for ", x.scalar_type());
  }
}
bnact::Act kernelAct(BnActivation a) {
  return a == BnActivation::Relu ? bnact::Act::Relu : a == BnActivation::Relu6 ? bnact::Act::Relu6 : bnact::Act::None;
}
bnact::Shape kernelShape(const torch::Tensor& x, const bnact::Kernels& k) {
  if (!x.is_cuda()) return {x.numel() / x.size(1), static_cast<int>(x.size(1)), k.sms};
  static thread_local int lastDevice = -1, lastSms = 1;
  const int device = x.get_device();
  if (device != lastDevice) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&lastSms, cudaDevAttrMultiProcessorCount, device));
    lastDevice = device;
  }
  return {x.numel() / x.size(1), static_cast<int>(x.size(1)), lastSms};
}
cudaStream_t streamOf(const torch::Tensor& x) {
  return x.is_cuda() ? c10::cuda::getCurrentCUDAStream(x.get_device()).stream() : nullptr;
}
const void* dataOrNull(const torch::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
// Buffers the kernels wrote through their data: their version counters move as an in-place update's do.
void bumpVersions(const torch::Tensor& a, const torch::Tensor& b) {
  a.unsafeGetTensorImpl()->bump_version();
  b.unsafeGetTensorImpl()->bump_version();
}
// A launch's error: c10's check for a device (it also reports device-side assertions), a plain one
// for kernels on the host (c10's would look for a device).
void checkLaunch(const torch::Tensor& on, cudaError_t err) {
  if (on.is_cuda()) {
    C10_CUDA_CHECK(err);
  } else {
    TORCH_CHECK(err == cudaSuccess, "fused batch norm: ", cudaGetErrorString(err));
  }
}
torch::Tensor scratchFor(const torch::Tensor& x, const bnact::Kernels& k) {
  return torch::empty({k.scratchFloats(kernelShape(x, k))}, x.options().dtype(torch::kFloat));
}
#endif

// Whether x's steps run on kernels (CUDA's, or the `host` table for CPU tensors).
bool onKernels(const torch::Tensor& x, const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  return kernelsFor(x, host) != nullptr;
#else
  (void)x, (void)host;
  return false;
#endif
}

// Per-channel mean and biased variance of x (float32, float64 for float64 x).
struct ChannelStats {
  torch::Tensor mean, var;
};

// Step 1: this process' batch statistics. With `finish`, also invstd and the running statistics'
// update (the unsynchronized path does both in the same kernels).
struct RunningUpdate {
  torch::Tensor* invstd = nullptr;
  double eps = 1e-5, momentum = 0.1;
  torch::Tensor runningMean, runningVar;  // undefined: not updated
};
ChannelStats batchMoments(const torch::Tensor& x, const RunningUpdate* finish, const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  if (const bnact::Kernels* k = kernelsFor(x, host)) {
    const c10::cuda::OptionalCUDAGuard onDevice(deviceOf(x));
    const torch::TensorOptions f = x.options().dtype(torch::kFloat);
    ChannelStats m{torch::empty({x.size(1)}, f), torch::empty({x.size(1)}, f)};
    torch::Tensor scratch = scratchFor(x, *k);
    float* invstd = nullptr;
    if (finish) {
      *finish->invstd = torch::empty({x.size(1)}, f);
      invstd = finish->invstd->data_ptr<float>();
    }
    const bool running = finish && finish->runningMean.defined();
    checkLaunch(x, k->stats(kernelType(x), x.data_ptr(), kernelShape(x, *k), scratch.data_ptr<float>(),
                                m.mean.data_ptr<float>(), m.var.data_ptr<float>(), invstd, finish ? finish->eps : 0.0,
                                finish ? finish->momentum : 0.0,
                                running ? finish->runningMean.data_ptr<float>() : nullptr,
                                running ? finish->runningVar.data_ptr<float>() : nullptr, streamOf(x)));
    if (running) bumpVersions(finish->runningMean, finish->runningVar);
    return m;
  }
#endif
  const torch::Tensor r = rowsOf(x).to(normMathType(x));
  ChannelStats m{r.mean(0), r.var(0, /*unbiased=*/false)};
  if (finish) {
    *finish->invstd = (m.var + finish->eps).rsqrt();
    if (finish->runningMean.defined()) {
      const double n = static_cast<double>(r.size(0));
      finish->runningMean.mul_(1 - finish->momentum).add_(m.mean.to(finish->runningMean.scalar_type()), finish->momentum);
      finish->runningVar.mul_(1 - finish->momentum)
          .add_((m.var * (n / std::max(1.0, n - 1))).to(finish->runningVar.scalar_type()), finish->momentum);
    }
  }
  return m;
}

// Values per channel the statistics cover: this process' own rows (on the host), or, synchronized,
// all ranks' summed on the device: a 0-dim float64 tensor the step never reads on the host.
struct ValueCount {
  double host = 0;
  torch::Tensor device;  // defined when summed over ranks
  const double* onDevice() const { return device.defined() ? device.data_ptr<double>() : nullptr; }
  torch::Tensor divide(const torch::Tensor& t) const { return device.defined() ? t / device : t / host; }
  torch::Tensor unbiased(const torch::Tensor& var) const {
    return device.defined() ? var * unbiasing(device) : var * (host / std::max(1.0, host - 1));
  }
};

// Step 1b: invstd and the running statistics from given moments over `count` values per channel.
torch::Tensor finishMoments(const ChannelStats& m, const ValueCount& count, const RunningUpdate& f,
                            const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  if (const bnact::Kernels* k = kernelsFor(m.mean, host)) {
    const c10::cuda::OptionalCUDAGuard onDevice(deviceOf(m.mean));
    torch::Tensor invstd = torch::empty_like(m.mean);
    const bool running = f.runningMean.defined();
    checkLaunch(m.mean, k->finalize(static_cast<int>(m.mean.size(0)), m.mean.data_ptr<float>(), m.var.data_ptr<float>(),
                                   count.host, count.onDevice(), invstd.data_ptr<float>(), f.eps, f.momentum,
                                   running ? f.runningMean.data_ptr<float>() : nullptr,
                                   running ? f.runningVar.data_ptr<float>() : nullptr, streamOf(m.mean)));
    if (running) bumpVersions(f.runningMean, f.runningVar);
    return invstd;
  }
#endif
  if (f.runningMean.defined()) {
    f.runningMean.mul_(1 - f.momentum).add_(m.mean.to(f.runningMean.scalar_type()), f.momentum);
    f.runningVar.mul_(1 - f.momentum).add_(count.unbiased(m.var).to(f.runningVar.scalar_type()), f.momentum);
  }
  return (m.var + f.eps).rsqrt();
}

// Step 2: y = act((x - mean)·invstd·weight + bias [+ z]).
torch::Tensor applyNorm(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& mean,
                        const torch::Tensor& invstd, const torch::Tensor& weight, const torch::Tensor& bias,
                        BnActivation act, const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  if (const bnact::Kernels* k = kernelsFor(x, host)) {
    const c10::cuda::OptionalCUDAGuard onDevice(deviceOf(x));
    torch::Tensor y = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    checkLaunch(x, k->apply(kernelType(x), x.data_ptr(), dataOrNull(z), y.data_ptr(), kernelShape(x, *k),
                                mean.data_ptr<float>(), invstd.data_ptr<float>(), weight.data_ptr<float>(),
                                bias.data_ptr<float>(), kernelAct(act), streamOf(x)));
    return y;
  }
#endif
  const torch::ScalarType t = normMathType(x);
  torch::Tensor y = (rowsOf(x).to(t) - mean.to(t)) * (invstd.to(t) * weight.to(t)) + bias.to(t);
  if (z.defined()) y = y + rowsOf(z).to(t);
  if (act == BnActivation::Relu) y = torch::relu(y);
  if (act == BnActivation::Relu6) y = torch::hardtanh(y, 0, 6);
  return likeInput(y.to(x.scalar_type()), x);
}

// Step 3: this process' backward sums: Σ g and Σ g·x̂ per channel, g = dy masked by act at y.
struct GradSums {
  torch::Tensor dy, dyXhat;
};
GradSums backwardSums(const torch::Tensor& dy, const torch::Tensor& y, const torch::Tensor& x,
                      const torch::Tensor& mean, const torch::Tensor& invstd, BnActivation act,
                      const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  if (const bnact::Kernels* k = kernelsFor(x, host)) {
    const c10::cuda::OptionalCUDAGuard onDevice(deviceOf(x));
    GradSums s{torch::empty_like(mean), torch::empty_like(mean)};
    torch::Tensor scratch = scratchFor(x, *k);
    checkLaunch(x, k->backwardSums(kernelType(x), dy.data_ptr(), dataOrNull(y), x.data_ptr(), kernelShape(x, *k),
                                       mean.data_ptr<float>(), invstd.data_ptr<float>(), kernelAct(act),
                                       scratch.data_ptr<float>(), s.dy.data_ptr<float>(), s.dyXhat.data_ptr<float>(),
                                       streamOf(x)));
    return s;
  }
#endif
  const torch::ScalarType t = normMathType(x);
  torch::Tensor g = rowsOf(dy).to(t);
  if (act != BnActivation::None) g = g * passMask(rowsOf(y), act).to(t);
  return {g.sum(0), (g * (rowsOf(x).to(t) - mean)).sum(0) * invstd};
}

// Step 4: dx (and dz = g when wanted) from the sums over `count` values per channel.
std::pair<torch::Tensor, torch::Tensor> backwardApply(const torch::Tensor& dy, const torch::Tensor& y,
                                                      const torch::Tensor& x, const torch::Tensor& mean,
                                                      const torch::Tensor& invstd, const torch::Tensor& weight,
                                                      const GradSums& sums, const ValueCount& count, BnActivation act,
                                                      bool wantDz, const bnact::Kernels* host) {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  if (const bnact::Kernels* k = kernelsFor(x, host)) {
    const c10::cuda::OptionalCUDAGuard onDevice(deviceOf(x));
    torch::Tensor dx = torch::empty_like(x, at::MemoryFormat::ChannelsLast);
    torch::Tensor dz = wantDz ? torch::empty_like(x, at::MemoryFormat::ChannelsLast) : torch::Tensor();
    checkLaunch(x, k->backwardApply(kernelType(x), dy.data_ptr(), dataOrNull(y), x.data_ptr(), dx.data_ptr(),
                                        wantDz ? dz.data_ptr() : nullptr, kernelShape(x, *k), mean.data_ptr<float>(),
                                        invstd.data_ptr<float>(), weight.data_ptr<float>(), sums.dy.data_ptr<float>(),
                                        sums.dyXhat.data_ptr<float>(), count.host, count.onDevice(), kernelAct(act),
                                        streamOf(x)));
    return {dx, dz};
  }
#endif
  const torch::ScalarType t = normMathType(x);
  torch::Tensor g = rowsOf(dy).to(t);
  if (act != BnActivation::None) g = g * passMask(rowsOf(y), act).to(t);
  const torch::Tensor xhat = (rowsOf(x).to(t) - mean) * invstd;
  const torch::Tensor dx = (g - count.divide(sums.dy) - xhat * count.divide(sums.dyXhat)) * (weight.to(t) * invstd);
  return {likeInput(dx.to(x.scalar_type()), x), wantDz ? likeInput(g.to(x.scalar_type()), x) : torch::Tensor()};
}

struct FusedBnActFunction : torch::autograd::Function<FusedBnActFunction> {
  // mean, invstd: the statistics x is normalised with (global ones when synchronized); count: the
  // values per channel they cover, and globalCount the same summed over ranks on the device when
  // synchronized (else empty).
  // z: the residual, or an empty tensor for none (a custom function's tensor arguments must be defined).
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, torch::Tensor z, torch::Tensor weight,
                               torch::Tensor bias, torch::Tensor mean, torch::Tensor invstd, int64_t act, double count,
                               torch::Tensor globalCount, Dist* dist, SyncCost* cost, const bnact::Kernels* host) {
    const BnActivation a = static_cast<BnActivation>(act);
    const bool hasZ = z.numel() > 0;
    torch::Tensor y = applyNorm(x, hasZ ? z : torch::Tensor(), mean, invstd, weight, bias, a, host);
    // The output only for the activation's mask (not kept with none: a later in-place change of it
    // would be refused for nothing).
    ctx->save_for_backward({x, a == BnActivation::None ? torch::Tensor() : y, weight, mean, invstd,
                            globalCount.numel() > 0 ? globalCount : torch::Tensor()});
    ctx->saved_data["act"] = act;
    ctx->saved_data["count"] = count;
    ctx->saved_data["z"] = hasZ;
    ctx->saved_data["dist"] = reinterpret_cast<std::int64_t>(dist);
    ctx->saved_data["cost"] = reinterpret_cast<std::int64_t>(cost);
    ctx->saved_data["host"] = reinterpret_cast<std::int64_t>(host);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    TORCH_CHECK(!torch::GradMode::is_enabled(),
                "the fused batch norm (model.fused) has no double backward (create_graph); run it with fused: false");
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &invstd = saved[4];
    const ValueCount count{ctx->saved_data["count"].toDouble(), saved[5]};
    const BnActivation act = static_cast<BnActivation>(ctx->saved_data["act"].toInt());
    Dist* dist = reinterpret_cast<Dist*>(ctx->saved_data["dist"].toInt());
    SyncCost* cost = reinterpret_cast<SyncCost*>(ctx->saved_data["cost"].toInt());
    const auto* host = reinterpret_cast<const bnact::Kernels*>(ctx->saved_data["host"].toInt());
    const bool wantDz = ctx->saved_data["z"].toBool() && ctx->needs_input_grad(1);
    torch::Tensor dy = grads[0];
    if (onKernels(dy, host)) dy = dy.contiguous(at::MemoryFormat::ChannelsLast);
    const GradSums local = backwardSums(dy, y, x, mean, invstd, act, host);
    GradSums global = local;
    if (dist) {
      torch::Tensor both = torch::cat({local.dy, local.dyXhat});
      sumOverRanks(*dist, both, cost);
      const std::int64_t c = local.dy.size(0);
      global = {both.narrow(0, 0, c), both.narrow(0, c, c)};
    }
    auto [dx, dz] = backwardApply(dy, y, x, mean, invstd, weight, global, count, act, wantDz, host);
    // The parameters' gradients stay this process' own (the gradient reducer averages them).
    return {dx, dz, local.dyXhat.to(weight.scalar_type()), local.dy.to(weight.scalar_type()), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

bool floatBuffer(const torch::Tensor& t, const torch::Tensor& x) {
  return t.defined() && t.scalar_type() == torch::kFloat && t.device() == x.device() && t.is_contiguous();
}

}  // namespace

torch::ScalarType normMathType(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

bool bnActKernelsBuilt() {
#if defined(EXPRUN_WITH_CUDA_KERNELS)
  return true;
#else
  return false;
#endif
}

bool bnActFusable(const torch::Tensor& x, const torch::Tensor& z, const torch::nn::BatchNorm2dImpl& bn,
                  const bnact::Kernels* host) {
  if (!bnActKernelsBuilt() || !x.defined() || !onKernels(x, host) || x.dim() != 4) return false;
  if (!kernelDtype(x)) return false;
  if (!x.is_contiguous(at::MemoryFormat::ChannelsLast) || x.numel() == 0) return false;
  if (z.defined() && (z.sizes() != x.sizes() || z.scalar_type() != x.scalar_type() || z.device() != x.device() ||
                      !z.is_contiguous(at::MemoryFormat::ChannelsLast)))
    return false;
  const auto& o = bn.options;
  if (!o.affine() || !o.track_running_stats() || !o.momentum() || o.num_features() != x.size(1)) return false;
  if (bn.weight.numel() != x.size(1) || bn.bias.numel() != x.size(1) || bn.running_mean.numel() != x.size(1) ||
      bn.running_var.numel() != x.size(1))
    return false;
  if (!floatBuffer(bn.weight, x) || !floatBuffer(bn.bias, x) || !floatBuffer(bn.running_mean, x) ||
      !floatBuffer(bn.running_var, x))
    return false;
  if (bn.is_training()) return x.numel() / x.size(1) > 1;
  return !torch::GradMode::is_enabled();
}

torch::Tensor fusedBnAct(const torch::Tensor& xIn, const torch::Tensor& z, torch::nn::BatchNorm2dImpl& bn,
                         BnActivation act, Dist* dist, SyncCost* cost, const bnact::Kernels* host) {
  const torch::Tensor x = onKernels(xIn, host) ? xIn.contiguous(at::MemoryFormat::ChannelsLast) : xIn;
  const auto& o = bn.options;
  TORCH_CHECK(o.affine() && o.momentum(), "fused batch norm: needs affine parameters and a momentum");
  TORCH_CHECK(o.num_features() == x.size(1) && bn.weight.numel() == x.size(1), "fused batch norm: ", x.size(1),
              " input channels for a batch norm of ", o.num_features());
  ValueCount count{static_cast<double>(x.numel() / x.size(1)), torch::Tensor()};
  Dist* syncDist = nullptr;  // the group the backward sums over: only when the statistics were global
  torch::Tensor mean, invstd;
  RunningUpdate finish{&invstd, o.eps(), o.momentum().value_or(0.1), torch::Tensor(), torch::Tensor()};
  {
    torch::NoGradGuard noGrad;
    if (!bn.is_training()) {
      mean = bn.running_mean.to(normMathType(x));
      invstd = finishMoments({mean, bn.running_var.to(normMathType(x))}, count, finish, host);
    } else {
      if (o.track_running_stats()) {
        bn.num_batches_tracked += 1;
        finish.runningMean = bn.running_mean;
        finish.runningVar = bn.running_var;
      }
      if (!dist) {
        mean = batchMoments(x, &finish, host).mean;
      } else {
        // Every rank's sums, sums of squares and counts in float64, as SyncBatchNorm2d's.
        const ChannelStats local = batchMoments(x, nullptr, host);
        const torch::Tensor m64 = local.mean.to(torch::kDouble), v64 = local.var.to(torch::kDouble);
        const double n = count.host;
        torch::Tensor stats = torch::cat({m64 * n, (v64 + m64 * m64) * n, torch::full({1}, n, m64.options())});
        sumOverRanks(*dist, stats, cost);
        const std::int64_t c = x.size(1);
        count.device = stats[2 * c];  // all ranks' values, left on the device
        const torch::Tensor gm = count.divide(stats.narrow(0, 0, c));
        const torch::Tensor gv = (count.divide(stats.narrow(0, c, c)) - gm * gm).clamp_min(0);
        mean = gm.to(normMathType(x));
        invstd = finishMoments({mean, gv.to(normMathType(x))}, count, finish, host);
        syncDist = dist;
      }
    }
  }
  const torch::Tensor residual = z.defined() ? z : torch::empty({0}, x.options());
  const torch::Tensor global =
      count.device.defined() ? count.device : torch::empty({0}, x.options().dtype(torch::kDouble));
  return FusedBnActFunction::apply(x, residual, bn.weight, bn.bias, mean, invstd, static_cast<int64_t>(act), count.host,
                                   global, syncDist, syncDist ? cost : nullptr, host);
}

}  // namespace exprun
