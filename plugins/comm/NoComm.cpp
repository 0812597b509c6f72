// Purpose: comm plugin `none` — no gradient exchange (single process, or local-only experiments).
#include "runner/dist/CommStrategy.h"

namespace exprun {
namespace {

class NoComm : public CommStrategy {
 public:
  void attach(Model&, Dist&) override {}
  double finish() override { return 0.0; }
};

const bool kRegistered = (commRegistry().add("none", "no gradient exchange (single process)", {},
                                             [](const Options&) -> std::unique_ptr<CommStrategy> {
                                               return std::make_unique<NoComm>();
                                             }),
                          true);

}  // namespace
}  // namespace exprun
