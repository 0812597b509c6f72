// Purpose: method `sync_batchnorm` — synchronized batch norm over the ranks (PyTorch's
// SyncBatchNorm, torchvision's --sync-bn): every batch norm of the model (runner/nn/SyncBatchNorm.h)
// normalises a training micro-batch with the mean and variance of all ranks' micro-batches
// together, for micro-batches too small for statistics of their own; 2 ranks x B then train as 1
// process x 2B. On one process it warns and changes nothing. Its cost — the allreduces' time, their
// number and bytes, per epoch and in all — is its section of the result file.
#include "runner/api/Method.h"
#include "runner/nn/SyncBatchNorm.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

class SyncBn : public Method {
 public:
  explicit SyncBn(const Options&) {}

  void setUp(RunContext& run) override {
    if (run.dist().worldSize() == 1) {
      log::warn("sync_batchnorm: a run on one process has no other batches to synchronize with: batch norm as usual");
      return;
    }
    const auto norms = syncBatchNorms(run.model());
    for (SyncBatchNorm2dImpl* bn : norms) bn->synchronize(&run.dist(), &cost_);
    layers_ = static_cast<std::int64_t>(norms.size());
    log::info(strf("sync_batchnorm: %lld batch norms synchronized over %d ranks", static_cast<long long>(layers_),
                   run.dist().worldSize()));
  }

  void restore(RunContext&, const nlohmann::json& state) override {
    const JsonFields f(state, "methods.sync_batchnorm");
    cost_.seconds = f.number("seconds");
    cost_.allreduces = f.integer("allreduces");
    cost_.bytes = f.integer("bytes");
    for (const JsonFields& e : f.objects("epochs", "an epoch object", false)) epochs_.push_back(e.json());
  }

  void beforeEpoch(RunContext&, std::int64_t, bool) override { atEpochStart_ = cost_; }

  void afterEpoch(RunContext&, EpochRecord& r) override {
    epochs_.push_back({{"epoch", r.epoch},
                       {"seconds", cost_.seconds - atEpochStart_.seconds},
                       {"allreduces", cost_.allreduces - atEpochStart_.allreduces},
                       {"bytes", cost_.bytes - atEpochStart_.bytes},
                       {"share_of_epoch", r.timeS > 0 ? (cost_.seconds - atEpochStart_.seconds) / r.timeS : 0.0}});
  }

  nlohmann::json state() const override {
    return {{"seconds", cost_.seconds}, {"allreduces", cost_.allreduces}, {"bytes", cost_.bytes}, {"epochs", epochs_}};
  }

  nlohmann::json figures() const override {
    nlohmann::json j = state();
    j["layers"] = layers_;
    double share = 0;
    for (const auto& e : epochs_) share += e["share_of_epoch"].get<double>();
    j["mean_share_of_epoch"] = epochs_.empty() ? 0.0 : share / static_cast<double>(epochs_.size());
    return j;
  }

 private:
  SyncCost cost_, atEpochStart_;
  std::int64_t layers_ = 0;
  nlohmann::json epochs_ = nlohmann::json::array();
};

PluginInfo info() {
  PluginInfo i;
  i.name = "sync_batchnorm";
  i.help = "batch norm with the statistics of every rank's micro-batch together (PyTorch's SyncBatchNorm)";
  i.columns = {ResultColumn{"Sync BN share of epoch", "sync_bn_share", "/mean_share_of_epoch", "%.3f"}};
  return i;
}

const Register<MethodKind> kRegistered{info(), [](const Options& o) -> std::unique_ptr<Method> {
                                         return std::make_unique<SyncBn>(o);
                                       }};

}  // namespace
}  // namespace exprun
