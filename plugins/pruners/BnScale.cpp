// Purpose: pruner `bn_scale` — network slimming (Liu et al., "Learning Efficient Convolutional
// Networks through Network Slimming", 2017): a channel's importance is |γ| of the batch norms on
// it (summed over the group's), and with `sparsity` > 0 training adds the L1 penalty's subgradient
// sparsity·sign(γ) to those scales' gradients on every step, driving unimportant channels to zero
// before they are pruned. A group without batch norm (a hidden linear layer) is ranked by its
// filters' L1 norm.
#include "runner/api/Pruner.h"

namespace exprun {
namespace {

struct BnScaleSettings {
  double sparsity = 0.0;
};
const OptionTable<BnScaleSettings> kOptions{{
    field("sparsity", &BnScaleSettings::sparsity, "L1 penalty on the batch-norm scales during training (0: none)",
          {0.0, 1.0}),
}};

class BnScale : public Pruner {
 public:
  explicit BnScale(BnScaleSettings s) : s_(s) {}
  torch::Tensor importance(const GroupTensors& group) const override {
    if (group.normScales.empty()) return filterL1(group);
    torch::Tensor score;
    for (const auto& g : group.normScales) {
      torch::Tensor a = g.detach().to(torch::kCPU, torch::kFloat).abs();
      score = score.defined() ? score + a : a;
    }
    return score;
  }
  void penalize(const std::vector<torch::Tensor>& normScales) const override {
    if (s_.sparsity <= 0) return;
    torch::NoGradGuard g;
    for (const auto& w : normScales)
      if (w.grad().defined()) w.mutable_grad().add_(torch::sign(w), s_.sparsity);
  }

 private:
  BnScaleSettings s_;
};

const Register<PrunerKind> kRegistered{"bn_scale", "channels with the smallest batch-norm |γ| go first (network slimming)",
                                       kOptions.decls(),
                                       [](const Options& o) { return std::make_unique<BnScale>(kOptions.read(o)); }};

}  // namespace
}  // namespace exprun
