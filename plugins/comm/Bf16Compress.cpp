// Purpose: comm plugin `bf16_compress` — the bucketed allreduce with buckets sent in bfloat16
// (half the bytes), averaged before the reduction, written back into float32 gradients.
#include "runner/dist/BucketedAllreduce.h"

namespace exprun {
namespace {

const bool kRegistered = (commRegistry().add(
                              "bf16_compress", "bucketed allreduce in bfloat16 (half the traffic)",
                              {floatOpt("bucket_mb", 25.0, "bucket size in MiB (of bfloat16 data)", 0.001)},
                              [](const Options& o) -> std::unique_ptr<CommStrategy> {
                                return std::make_unique<BucketedAllreduce>(o.getFloat("bucket_mb"), torch::kBFloat16);
                              }),
                          true);

}  // namespace
}  // namespace exprun
