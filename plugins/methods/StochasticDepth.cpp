// Purpose: method `stochastic_depth` — stochastic depth (Huang et al. 2016; timm's drop_path,
// torchvision's StochasticDepth in "row" mode): in training each residual branch is dropped for a
// sample with probability p and kept ×1/(1−p) otherwise; evaluation is untouched. p rises linearly
// over the model's residual branches, from 0 at the first to `rate` at the last.
// Rule: a sample's draw comes from (seed, step, micro-batch, branch, global position), so N ranks
// draw what one process draws, recomputation draws again what the forward drew, and a resumed run
// draws what the uninterrupted one did.
#include <algorithm>
#include <memory>

#include "runner/api/Method.h"
#include "runner/dist/Dist.h"
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

// What the hooks read: they hold it, so a model that outlives the method never reaches a freed one.
struct DrawState {
  std::uint64_t seed = 0;
  std::int64_t step = 0, micro = 0;
  int rank = 0, worldSize = 1;
};

// branch · keep / (1 − p), keep = [u < 1 − p] per sample with u uniform from (seed, step, micro,
// branch, global position): rank r's i-th sample is position i·W + r of the step's global
// micro-batch (the sampler deals the order out to the ranks in turn).
torch::Tensor drop(const DrawState& st, std::size_t branchIndex, double p, const torch::Tensor& branch) {
  if (p <= 0) return branch;
  const std::uint64_t base = splitmix64(st.seed ^ splitmix64(0x64726f70ull + static_cast<std::uint64_t>(st.step)) ^
                                        (static_cast<std::uint64_t>(st.micro) << 40) ^
                                        (static_cast<std::uint64_t>(branchIndex) << 20));
  const std::int64_t n = branch.size(0);
  torch::Tensor mask = torch::empty({n}, torch::kFloat32);
  float* m = mask.data_ptr<float>();
  const float kept = static_cast<float>(1.0 / (1.0 - p));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto position = static_cast<std::uint64_t>(i * st.worldSize + st.rank);
    const double u = static_cast<double>(splitmix64(base ^ splitmix64(position + 1)) >> 11) * 0x1.0p-53;
    m[i] = u < 1.0 - p ? kept : 0.0f;
  }
  if (branch.is_cuda()) mask = mask.pin_memory().to(branch.device(), /*non_blocking=*/true);
  std::vector<std::int64_t> shape(static_cast<std::size_t>(branch.dim()), 1);
  shape[0] = n;
  return branch * mask.to(branch.scalar_type()).view(shape);
}

// Which of the model's batch norms a residual is added to, in the model's order: one training
// forward of a throwaway copy (the run's model and its statistics are not touched) with a hook
// on every norm that notes being called.
std::vector<bool> residualNorms(RunContext& run) {
  std::shared_ptr<Model> probe = run.freshModel();
  const std::vector<SyncBatchNorm2dImpl*> norms = syncBatchNorms(*probe);
  std::vector<bool> residual(norms.size(), false);
  for (std::size_t i = 0; i < norms.size(); ++i)
    norms[i]->setResidualBranch([&residual, i](const torch::Tensor& branch) {
      residual[i] = true;
      return branch;
    });
  const DataInfo d = run.dataInfo();
  probe->train();
  torch::NoGradGuard noGrad;
  probe->forward(torch::zeros({2, d.channels, d.height, d.width}));
  return residual;
}

// Acts on every residual add a model makes through a batch norm (SyncBatchNorm2dImpl::forwardAct's
// branch hook: ResNet's blocks, MobileNetV2's inverted residuals), found at set-up by residualNorms;
// a model with none is refused.
class StochasticDepth : public Method {
 public:
  explicit StochasticDepth(const Options& o) : s_(kOptions.read(o)), state_(std::make_shared<DrawState>()) {}

  void setUp(RunContext& run) override {
    state_->seed = static_cast<std::uint64_t>(run.spec().seed);
    state_->rank = run.dist().rank();
    state_->worldSize = run.dist().worldSize();
    const std::vector<bool> residual = residualNorms(run);
    const std::vector<SyncBatchNorm2dImpl*> norms = syncBatchNorms(run.model());
    const auto branches = static_cast<std::size_t>(std::count(residual.begin(), residual.end(), true));
    if (branches == 0 || residual.size() != norms.size())
      throw std::invalid_argument("methods: stochastic_depth: model '" + run.spec().model.type() +
                                  "' adds no residual through a batch norm: there is no branch to drop");
    std::size_t k = 0;
    for (std::size_t i = 0; i < norms.size(); ++i) {
      if (!residual[i]) continue;
      const double p = branches == 1 ? s_.rate : s_.rate * static_cast<double>(k) / static_cast<double>(branches - 1);
      norms[i]->setResidualBranch(
          [st = state_, k, p](const torch::Tensor& branch) { return drop(*st, k, p, branch); });
      ++k;
    }
    log::info(strf("stochastic_depth: %zu residual branches dropped with p from 0 to %g", branches, s_.rate));
  }

  void onBatch(StepBatch& b) override {
    state_->step = b.step;
    state_->micro = b.micro;
  }

 private:
  StochasticDepthSettings s_;
  std::shared_ptr<DrawState> state_;
};

PluginInfo info() {
  PluginInfo i;
  i.name = "stochastic_depth";
  i.help = "drop each residual branch per sample in training, p rising to `rate` over the branches (timm's drop_path)";
  i.options = kOptions.decls();
  i.tasks = {"classification"};  // residual branches of the image models
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<StochasticDepth>(o);
                                       }};

}  // namespace
}  // namespace exprun
