// Purpose: comm plugin `none` — no gradient exchange: every rank keeps its own gradients
// (local-only experiments; a single process reduces nothing whatever the plugin).
#include "runner/api/CommHook.h"

namespace exprun {
namespace {

class NoComm : public CommHook {
 public:
  BucketFuture operator()(GradBucket& bucket, Dist&) override { return BucketFuture::ready(bucket.buffer); }
};

const Register<CommKind> kRegistered{
    "none",
    "no gradient exchange (every rank keeps its own gradients)",
    {},
    [](const Options&) -> std::unique_ptr<CommHook> { return std::make_unique<NoComm>(); }};

}  // namespace
}  // namespace exprun
