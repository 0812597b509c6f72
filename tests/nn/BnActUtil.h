// Purpose: what the fused batch norm's tests share (tests/nn/BnActTest.cpp on the CPU and the
// device, tests/cudaemu/CudaEmuTest.cpp with the kernels emulated): a seeded module, libtorch's
// modules as the reference, one forward + backward through fusedBnAct, the comparison.
#pragma once

#include <doctest/doctest.h>
#include <torch/torch.h>

#include <optional>

#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/dist/Dist.h"
#include "runner/nn/BnAct.h"
#include "runner/nn/SyncBatchNorm.h"
#include "runner/spec/Spec.h"

namespace exprun::bntest {


inline const char* actName(BnActivation a) {
  return a == BnActivation::Relu ? "relu" : a == BnActivation::Relu6 ? "relu6" : "none";
}

inline torch::Tensor activated(torch::Tensor v, BnActivation a) {
  if (a == BnActivation::Relu) return torch::relu(v);
  if (a == BnActivation::Relu6) return torch::hardtanh(v, 0, 6);
  return v;
}

inline double rel(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor a64 = a.to(torch::kDouble), b64 = b.to(torch::kDouble);
  return ((a64 - b64).norm() / b64.norm().clamp_min(1e-30)).item<double>();
}

// A module with non-trivial parameters and running statistics, seeded.
inline torch::nn::BatchNorm2d seededBn(std::int64_t c, std::uint64_t seed) {
  torch::manual_seed(seed);
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(c).momentum(0.3));
  torch::NoGradGuard noGrad;
  bn->weight.uniform_(0.5, 1.5);
  bn->bias.uniform_(-0.5, 0.5);
  bn->running_mean.uniform_(-1, 1);
  bn->running_var.uniform_(0.5, 2);
  return bn;
}

// What the fused function and the modules produce for one forward and backward.
struct Outcome {
  torch::Tensor y, dx, dz, dw, db, runningMean, runningVar, batches;
};
// The outcome of output y of module m, after a backward, with inputs x and z (z may be undefined).
inline Outcome outcomeOf(const torch::Tensor& y, const torch::Tensor& x, const torch::Tensor& z,
                         const torch::nn::BatchNorm2dImpl& m) {
  return {y, x.grad(), z.defined() ? z.grad() : torch::Tensor(), m.weight.grad(), m.bias.grad(),
          m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()};
}

// The reference: libtorch's BatchNorm2d (a copy of `bn` in `type`), + z, the activation. With
// `maskAt` (the activations' type), the activation's gradient is masked at its output rounded to
// that type, as an in-place activation on a tensor of that type masks it (torchvision's
// ReLU6(inplace=True) under autocast, and the fused kernels): in bf16 an output just under 6
// rounds to 6 and passes no gradient. ReLU's mask is the same either way.
inline Outcome reference(const torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& z,
                         const torch::Tensor& dy, BnActivation act, torch::ScalarType type,
                         std::optional<torch::ScalarType> maskAt = std::nullopt) {
  auto copy = std::dynamic_pointer_cast<torch::nn::BatchNorm2dImpl>(bn->clone());
  copy->to(type);
  const torch::Tensor xr = x.detach().to(type).requires_grad_(true);
  const torch::Tensor zr = z.defined() ? z.detach().to(type).requires_grad_(true) : torch::Tensor();
  torch::Tensor out = copy->forward(xr);
  if (zr.defined()) out = out + zr;
  torch::Tensor y;
  if (maskAt && act != BnActivation::None) {
    y = activated(out.detach(), act);
    const torch::Tensor rounded = y.to(*maskAt).to(type);
    const torch::Tensor blocked =
        act == BnActivation::Relu ? rounded <= 0 : (rounded <= 0).logical_or(rounded >= 6);
    out.backward(dy.to(type) * blocked.logical_not().to(type));
  } else {
    out = activated(out, act);
    out.backward(dy.to(type));
    y = out.detach();
  }
  return outcomeOf(y, xr, zr, *copy);
}

// The type to mask the reference's activation at for activations of `type`: its own when it is a
// 16-bit one.
inline std::optional<torch::ScalarType> maskedAt(torch::ScalarType type) {
  if (type == torch::kBFloat16 || type == torch::kHalf) return type;
  return std::nullopt;
}

// `values` in `type` as a channels_last tensor whose data starts one element into its storage: not
// 16-byte aligned, so the kernels take their one-value loads.
inline torch::Tensor unalignedView(const torch::Tensor& values, torch::ScalarType type) {
  const auto s = values.sizes();
  const torch::Tensor flat = torch::empty({values.numel() + 1}, values.options().dtype(type));
  torch::Tensor x = flat.narrow(0, 1, values.numel()).view({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2});
  x.copy_(values);
  return x;
}

// One forward and backward through fusedBnAct with `bn`'s parameters (synchronized over `dist`
// when given; CPU tensors through the `host` kernel table when given).
inline Outcome fused(torch::nn::BatchNorm2d& bn, const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& dy,
                     BnActivation act, Dist* dist = nullptr, const bnact::Kernels* host = nullptr) {
  const torch::Tensor xf = x.detach().clone().requires_grad_(true);
  const torch::Tensor zf = z.defined() ? z.detach().clone().requires_grad_(true) : torch::Tensor();
  torch::Tensor out = fusedBnAct(xf, zf, *bn, act, dist, nullptr, host);
  out.backward(dy);
  return outcomeOf(out.detach(), xf, zf, *bn);
}

// The reference of a rank's part of a synchronized batch: SyncBatchNorm2d (momentum 0.3) over
// `dist` in float64, + z, ReLU.
inline Outcome syncedReference(Dist& dist, const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& dy) {
  SyncCost cost;
  SyncBatchNorm2d sync(torch::nn::BatchNorm2dOptions(x.size(1)).momentum(0.3));
  sync->to(torch::kDouble);
  sync->synchronize(&dist, &cost);
  const torch::Tensor xs = x.detach().to(torch::kDouble).clone().requires_grad_(true);
  const torch::Tensor zs = z.detach().to(torch::kDouble).clone().requires_grad_(true);
  torch::Tensor out = sync->forwardAct(xs, zs, BnActivation::Relu);
  out.backward(dy.to(torch::kDouble));
  return outcomeOf(out.detach(), xs, zs, *sync);
}

// A fresh BatchNorm2d (momentum 0.3) for x's channels, in x's type: the fused side of a
// synchronized comparison.
inline torch::nn::BatchNorm2d plainBnFor(const torch::Tensor& x) {
  torch::nn::BatchNorm2d bn(torch::nn::BatchNorm2dOptions(x.size(1)).momentum(0.3));
  bn->to(x.scalar_type());
  return bn;
}

// `model` (resnet18 with the small-input stem, or mobilenet_v2) for size² RGB images and 10
// classes, `fused` or not, its parameters seeded, in training mode; its norms run CPU tensors
// through the `host` kernel table when given.
inline std::shared_ptr<Model> seededModel(const std::string& model, bool fuse, std::int64_t size,
                                          const bnact::Kernels* host = nullptr) {
  const std::string yaml = "name: t\nmodel: {type: " + model + ", fused: " + (fuse ? "true" : "false") +
                           (model == "resnet18" ? ", small_input_stem: true" : "") + "}\ndata: {type: synthetic}\n";
  const Spec s = loadSpecFromString(yaml, "s.yaml");
  torch::manual_seed(5);
  auto m = registry<ModelKind>().get(model)(s.model, DataInfo{3, size, size, 10});
  for (SyncBatchNorm2dImpl* bn : syncBatchNorms(*m)) bn->runHostTensorsOn(host);
  m->train();
  return m;
}

// Every part of `got` within `tol` (relative L2) of `want`.
inline void checkClose(const Outcome& got, const Outcome& want, double tol) {
  CHECK(rel(got.y, want.y) <= tol);
  CHECK(rel(got.dx, want.dx) <= tol);
  CHECK(got.dz.defined() == want.dz.defined());
  if (want.dz.defined()) CHECK(rel(got.dz, want.dz) <= tol);
  CHECK(rel(got.dw, want.dw) <= tol);
  CHECK(rel(got.db, want.db) <= tol);
  CHECK(rel(got.runningMean, want.runningMean) <= 1e-5);
  CHECK(rel(got.runningVar, want.runningVar) <= 1e-5);
  CHECK(got.batches.item<std::int64_t>() == want.batches.item<std::int64_t>());
}

inline torch::Tensor inFormat(torch::Tensor t, bool channelsLast) {
  return channelsLast ? t.contiguous(at::MemoryFormat::ChannelsLast) : t.contiguous();
}


}  // namespace exprun::bntest
