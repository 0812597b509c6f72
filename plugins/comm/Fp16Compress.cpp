// Purpose: comm plugin `fp16_compress` — the bucketed allreduce with buckets sent in float16,
// averaged before the reduction (to stay in range), written back into float32 gradients.
#include "runner/dist/BucketedAllreduce.h"

namespace exprun {
namespace {

const bool kRegistered = (commRegistry().add(
                              "fp16_compress", "bucketed allreduce in float16 (half the traffic)",
                              {floatOpt("bucket_mb", 25.0, "bucket size in MiB (of float16 data)", 0.001)},
                              [](const Options& o) -> std::unique_ptr<CommStrategy> {
                                return std::make_unique<BucketedAllreduce>(o.getFloat("bucket_mb"), torch::kHalf);
                              }),
                          true);

}  // namespace
}  // namespace exprun
