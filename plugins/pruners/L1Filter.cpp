// Purpose: pruner `l1_filter` — filter pruning by L1 norm (Li et al., "Pruning Filters for
// Efficient ConvNets", 2017): a channel's importance is the L1 norm of the filter that produces
// it, summed over the group's producers where a residual sum joins several.
#include "runner/api/Pruner.h"

namespace exprun {
namespace {

class L1Filter : public Pruner {
 public:
  torch::Tensor importance(const GroupTensors& group) const override { return filterL1(group); }
};

const Register<PrunerKind> kRegistered{"l1_filter", "filters with the smallest L1 norm go first (Li et al. 2017)", {},
                                       [](const Options&) { return std::make_unique<L1Filter>(); }};

}  // namespace
}  // namespace exprun
