// Purpose: method `stochastic_depth` — stochastic depth (Huang et al. 2016; timm's drop_path,
// torchvision's StochasticDepth in "row" mode): in training, each residual branch is dropped for a
// sample with probability p and kept ×1/(1−p) otherwise, so the block passes its identity alone;
// evaluation is untouched. p rises linearly with the batch norm's place in the model, from 0 at the
// first to `rate` at the last (timm's drop_path_rate schedule over the blocks). It acts on every
// residual add a model makes through a batch norm (SyncBatchNorm2dImpl::forwardAct's branch hook:
// ResNet's blocks, MobileNetV2's inverted residuals); a model without one is refused. The draws
// come from (seed, optimizer step, micro-batch, layer): the same on every rank for a sample
// position, repeated when activation checkpointing recomputes a stage, and a resumed run draws what
// the uninterrupted one did.
#include <random>

#include "runner/api/Method.h"
#include "runner/nn/SyncBatchNorm.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

struct StochasticDepthSettings {
  double rate = 0.1;
};
const OptionTable<StochasticDepthSettings> kOptions{{
    field("rate", &StochasticDepthSettings::rate, "drop probability of the last residual branch (0 at the first)", {0.0, 0.99}),
}};

class StochasticDepth : public Method {
 public:
  explicit StochasticDepth(const Options& o) : s_(kOptions.read(o)) {}

  void setUp(RunContext& run) override {
    seed_ = static_cast<std::uint64_t>(run.spec().seed);
    const std::vector<SyncBatchNorm2dImpl*> norms = syncBatchNorms(run.model());
    if (norms.empty())
      throw std::invalid_argument("methods: stochastic_depth: model '" + run.spec().model.type() +
                                  "' has no batch norm before a residual add to drop");
    for (std::size_t i = 0; i < norms.size(); ++i) {
      const double p = norms.size() == 1 ? s_.rate : s_.rate * static_cast<double>(i) / static_cast<double>(norms.size() - 1);
      norms[i]->setResidualBranch([this, i, p](const torch::Tensor& branch) { return drop(branch, i, p); });
    }
    log::info(strf("stochastic_depth: residual branches dropped with p from 0 to %g over %zu batch norms", s_.rate,
                   norms.size()));
  }

  void onBatch(StepBatch& b) override {
    step_ = b.step;
    micro_ = b.micro;
  }

 private:
  // branch · keep / (1 − p), keep ~ Bernoulli(1 − p) per sample, drawn from (seed, step, micro, layer).
  torch::Tensor drop(const torch::Tensor& branch, std::size_t layer, double p) const {
    if (p <= 0) return branch;
    std::mt19937_64 rng(splitmix64(seed_ ^ splitmix64(0x64726f70ull + static_cast<std::uint64_t>(step_)) ^
                                   (static_cast<std::uint64_t>(micro_) << 40) ^ (static_cast<std::uint64_t>(layer) << 20)));
    std::bernoulli_distribution keep(1.0 - p);
    const std::int64_t n = branch.size(0);
    torch::Tensor mask = torch::empty({n}, torch::kFloat32);
    float* m = mask.data_ptr<float>();
    for (std::int64_t i = 0; i < n; ++i) m[i] = keep(rng) ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
    if (branch.is_cuda()) mask = mask.pin_memory().to(branch.device(), /*non_blocking=*/true);
    std::vector<std::int64_t> shape(static_cast<std::size_t>(branch.dim()), 1);
    shape[0] = n;
    return branch * mask.to(branch.scalar_type()).view(shape);
  }

  StochasticDepthSettings s_;
  std::uint64_t seed_ = 0;
  std::int64_t step_ = 0, micro_ = 0;
};

PluginInfo info() {
  PluginInfo i;
  i.name = "stochastic_depth";
  i.help = "drop each residual branch per sample in training, p rising to `rate` with depth (timm's drop_path)";
  i.options = kOptions.decls();
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<StochasticDepth>(o);
                                       }};

}  // namespace
}  // namespace exprun
