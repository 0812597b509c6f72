// Purpose: comm plugin `allreduce` — bucketed gradient allreduce launched during backward as soon
// as each bucket's gradients are ready (see runner/dist/BucketedAllreduce.h), like Python DDP.
#include "runner/dist/BucketedAllreduce.h"

namespace exprun {
namespace {

const bool kRegistered = (commRegistry().add(
                              "allreduce", "bucketed allreduce overlapped with backward (like DDP)",
                              {floatOpt("bucket_mb", 25.0, "bucket size in MiB", 0.001)},
                              [](const Options& o) -> std::unique_ptr<CommStrategy> {
                                return std::make_unique<BucketedAllreduce>(o.getFloat("bucket_mb"), torch::kFloat32);
                              }),
                          true);

}  // namespace
}  // namespace exprun
