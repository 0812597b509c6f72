// Purpose: pruner `none` — the default: no channel is pruned.
#include "runner/api/Pruner.h"

namespace exprun {
namespace {

class NoPruning : public Pruner {
 public:
  bool prunes() const override { return false; }
  torch::Tensor importance(const GroupTensors&) const override { return {}; }
};

const Register<PrunerKind> kRegistered{"none", "no pruning", {}, [](const Options&) { return std::make_unique<NoPruning>(); }};

}  // namespace
}  // namespace exprun
