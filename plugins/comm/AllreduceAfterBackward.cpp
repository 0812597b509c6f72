// Purpose: comm plugin `allreduce_after_backward` — the simple reference: after backward, every
// gradient is flattened into one buffer, reduced by one allreduce, averaged and copied back.
// No overlap with computation; kept to measure what the bucketed `allreduce` buys.
#include "runner/dist/CommStrategy.h"
#include "runner/metrics/Meters.h"

namespace exprun {
namespace {

class AllreduceAfterBackward : public CommStrategy {
 public:
  void attach(Model& model, Dist& dist) override {
    dist_ = &dist;
    for (auto& p : model.parameters())
      if (p.requires_grad()) params_.push_back(p);
  }
  double finish() override {
    if (!dist_ || !dist_->active() || !sync_) return 0.0;
    Stopwatch clock;
    std::vector<torch::Tensor> grads;
    for (auto& p : params_) grads.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}, p.options()));
    torch::Tensor flat = torch::cat(grads);
    dist_->allreduceAsync(flat)->wait();
    flat.div_(dist_->worldSize());
    std::int64_t offset = 0;
    for (auto& p : params_) {
      auto reduced = flat.narrow(0, offset, p.numel()).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(reduced);
      else
        p.mutable_grad() = reduced.clone();
      offset += p.numel();
    }
    return clock.seconds();
  }

 private:
  Dist* dist_ = nullptr;
  std::vector<torch::Tensor> params_;
};

const bool kRegistered = (commRegistry().add("allreduce_after_backward",
                                             "one coalesced allreduce after backward (no overlap; reference)", {},
                                             [](const Options&) -> std::unique_ptr<CommStrategy> {
                                               return std::make_unique<AllreduceAfterBackward>();
                                             }),
                          true);

}  // namespace
}  // namespace exprun
