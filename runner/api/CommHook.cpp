// Purpose: the bucket option, bucket futures and the plain averaging hook (see CommHook.h).
#include "runner/api/CommHook.h"

namespace exprun {

const OptionTable<BucketSettings>& bucketOptions() {
  static const OptionTable<BucketSettings> table{{
      field("bucket_mb", &BucketSettings::bucketMb, "bucket size in MiB of gradients", {0.001}),
  }};
  return table;
}

BucketFuture BucketFuture::ready(torch::Tensor value) {
  BucketFuture f;
  f.value_ = std::move(value);
  return f;
}

torch::Tensor BucketFuture::wait() {
  if (work_) {
    work_->wait();
    work_.reset();
  }
  if (then_) {
    value_ = then_();
    then_ = nullptr;
  }
  return value_;
}

BucketFuture allreduceAverage(torch::Tensor t, Dist& dist) {
  auto work = dist.allreduceAsync(t);
  return BucketFuture(std::move(work), [t, &dist]() mutable { return t.div_(dist.worldSize()); });
}

}  // namespace exprun
