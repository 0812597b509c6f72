// Purpose: comm plugins `bf16_compress` and `fp16_compress` — each bucket sent in half precision
// (half the bytes): cast, divided by the world size before the sum (to stay in range), allreduced,
// and written back into the float32 gradients (PyTorch's fp16_compress_hook / bf16_compress_hook).
#include "runner/api/CommHook.h"

namespace exprun {
namespace {

class Compress : public CommHook {
 public:
  Compress(double bucketMb, torch::ScalarType wire) : bucketMb_(bucketMb), wire_(wire) {}
  Bucketing bucketing() const override { return {bucketMb_, true}; }
  BucketFuture operator()(GradBucket& bucket, Dist& dist) override {
    torch::Tensor compressed = bucket.buffer.to(wire_).div_(dist.worldSize());
    auto work = dist.allreduceAsync(compressed);
    return BucketFuture(std::move(work), [compressed] { return compressed; });
  }

 private:
  double bucketMb_;
  torch::ScalarType wire_;
};

CommKind::Factory compressing(torch::ScalarType wire) {
  return [wire](const Options& o) -> std::unique_ptr<CommHook> {
    return std::make_unique<Compress>(bucketOptions().read(o).bucketMb, wire);
  };
}

const Register<CommKind> kBf16{"bf16_compress", "bucketed allreduce in bfloat16 (half the traffic)",
                               bucketOptions().decls(), compressing(torch::kBFloat16)};
const Register<CommKind> kFp16{"fp16_compress", "bucketed allreduce in float16 (half the traffic)",
                               bucketOptions().decls(), compressing(torch::kHalf)};

}  // namespace
}  // namespace exprun
