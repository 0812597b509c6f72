// Purpose: the engine of the `allreduce`, `bf16_compress` and `fp16_compress` comm plugins —
// what c10d's Reducer does for Python DDP, written for C++: parameters are grouped into buckets
// of about bucket_mb in reverse registration order (the order gradients become ready; identical
// on every rank). A post hook on each parameter's gradient accumulator copies the fresh gradient
// into its bucket; when a bucket is full its allreduce is launched asynchronously, always in
// bucket order so every rank issues the same collectives in the same sequence. finish() launches
// what is left (parameters that got no gradient contribute zeros), waits, averages and copies
// the results back into .grad.
// Uncompressed buckets go one step further, like DDP's gradient_as_bucket_view: each .grad is a
// view into its bucket, autograd accumulates straight into the bucket, and no gradient is copied.
#pragma once

#include <mutex>

#include "runner/dist/CommStrategy.h"

namespace exprun {

class BucketedAllreduce : public CommStrategy {
 public:
  // wireDtype: the dtype buckets travel in (float32 = no compression; bf16/fp16 compress).
  BucketedAllreduce(double bucketMb, torch::ScalarType wireDtype) : bucketBytes_(bucketMb * 1048576.0), wire_(wireDtype) {}
  ~BucketedAllreduce() override;
  void attach(Model& model, Dist& dist) override;
  double finish() override;
  bool keepsGradStorage() const override { return views_; }

  // For tests: parameter indices of each bucket.
  std::vector<std::vector<size_t>> bucketLayout() const;

 private:
  struct Slot {
    size_t bucket;
    std::int64_t offset, numel;
  };
  struct Bucket {
    std::vector<size_t> params;
    torch::Tensor buffer;  // flat, wire dtype
    size_t pending = 0;    // gradients still to arrive in this step
    c10::intrusive_ptr<c10d::Work> work;
  };
  void onGradReady(size_t param);
  void launchReady();  // launches consecutive complete buckets, in order (mu_ held)
  void launch(Bucket& b);

  double bucketBytes_;
  torch::ScalarType wire_;
  bool views_ = false;  // .grad tensors are views into the buckets
  Dist* dist_ = nullptr;
  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;
  size_t nextLaunch_ = 0;
  std::mutex mu_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks' nodes alive
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace exprun
