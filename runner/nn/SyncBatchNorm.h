// Purpose: the batch norm the models are built with — LibTorch's BatchNorm2d (same parameters,
// buffers and state-dict keys; the same results) whose training forward can use the batch
// statistics of every rank's micro-batch together (synchronized batch norm, PyTorch's
// SyncBatchNorm). It is off until a method (sync_batchnorm) gives it the process group; evaluation
// uses the running statistics, as batch norm does.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>

#include "runner/dist/Dist.h"
#include "runner/nn/BnAct.h"

namespace exprun {

// What synchronizing cost: the allreduces' time on the host (forward and backward), their number and bytes.
struct SyncCost {
  double seconds = 0;
  std::int64_t allreduces = 0, bytes = 0;
};

class SyncBatchNorm2dImpl : public torch::nn::BatchNorm2dImpl {
 public:
  using torch::nn::BatchNorm2dImpl::BatchNorm2dImpl;
  torch::Tensor forward(const torch::Tensor& input) { return forwardAct(input, torch::Tensor(), BnActivation::None); }
  // act(this(x) + z), z optional: the fused kernels (runner/nn/BnAct.h) when fuse(true) was asked
  // and bnActFusable holds, else this module, then `+= z` and the in-place activation.
  torch::Tensor forwardAct(const torch::Tensor& x, const torch::Tensor& z, BnActivation act);
  // Take the fused kernels where they apply (models' `fused` option); off by default.
  void fuse(bool on) { fused_ = on; }
  bool fused() const { return fused_; }
  // In training, what forwardAct does to this norm's output before a residual is added to it
  // (a method's: stochastic depth drops the branch per sample); empty: nothing. The fused kernels
  // are not taken while one is set.
  using BranchHook = std::function<torch::Tensor(const torch::Tensor&)>;
  void setResidualBranch(BranchHook hook) { branch_ = std::move(hook); }
  // The kernel table CPU tensors run through when fused (bnActFusable's `host`; null: ATen's ops).
  void runHostTensorsOn(const bnact::Kernels* host) { host_ = host; }
  // Synchronize over `dist` (its cost added to `cost`), or not (null). Synchronized, the
  // per-channel sums, sums of squares and counts are summed over the ranks in one allreduce, the
  // batch is normalised with the global mean and variance, the running statistics follow them, and
  // the backward pass sums its two per-channel reductions over the ranks too (the weight and bias
  // gradients stay local: the gradient reducer averages them).
  void synchronize(Dist* dist, SyncCost* cost) {
    dist_ = dist;
    cost_ = cost;
  }
  bool synchronized() const { return dist_ != nullptr; }

 private:
  torch::Tensor normalise(const torch::Tensor& input);
  Dist* dist_ = nullptr;
  SyncCost* cost_ = nullptr;
  bool fused_ = false;
  BranchHook branch_;
  const bnact::Kernels* host_ = nullptr;
};
TORCH_MODULE(SyncBatchNorm2d);

// The same module as LibTorch's BatchNorm2d holder (a model's graph nodes hold that type).
inline torch::nn::BatchNorm2d asBatchNorm2d(const SyncBatchNorm2d& bn) {
  return torch::nn::BatchNorm2d(std::static_pointer_cast<torch::nn::BatchNorm2dImpl>(bn.ptr()));
}

// In place: `t` summed over the ranks, the allreduce's time and bytes added to `cost` (may be null).
void sumOverRanks(Dist& dist, torch::Tensor& t, SyncCost* cost);
// Bessel's correction n / max(1, n - 1) for a count n held as a tensor (0-dim, float64), on its device.
torch::Tensor unbiasing(const torch::Tensor& count);

// The batch norms of `model` (every SyncBatchNorm2dImpl among its modules).
std::vector<SyncBatchNorm2dImpl*> syncBatchNorms(torch::nn::Module& model);

}  // namespace exprun
