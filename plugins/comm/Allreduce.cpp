// Purpose: comm plugins `allreduce` — each bucket averaged by an allreduce launched during
// backward as soon as the bucket is complete (overlapped, like Python DDP) — and
// `allreduce_after_backward` — one allreduce of all gradients after backward, the no-overlap
// reference that shows what the overlap buys.
#include <limits>

#include "runner/api/CommHook.h"

namespace exprun {
namespace {

class Allreduce : public CommHook {
 public:
  explicit Allreduce(Bucketing bucketing) : bucketing_(bucketing) {}
  Bucketing bucketing() const override { return bucketing_; }
  bool plainAverage() const override { return true; }
  BucketFuture operator()(GradBucket& bucket, Dist& dist) override { return allreduceAverage(bucket.buffer, dist); }

 private:
  Bucketing bucketing_;
};

const Register<CommKind> kAllreduce{
    "allreduce", "bucketed allreduce overlapped with backward (like DDP)", bucketOptions().decls(),
    [](const Options& o) -> std::unique_ptr<CommHook> {
      return std::make_unique<Allreduce>(Bucketing{bucketOptions().read(o).bucketMb, true});
    }};

const Register<CommKind> kAfterBackward{
    "allreduce_after_backward",
    "one allreduce of all gradients after backward (no overlap; reference)",
    {},
    [](const Options&) -> std::unique_ptr<CommHook> {
      return std::make_unique<Allreduce>(Bucketing{std::numeric_limits<double>::infinity(), false});
    }};

}  // namespace
}  // namespace exprun
