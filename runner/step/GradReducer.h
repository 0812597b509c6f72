// Purpose: the bucket engine — what c10d's Reducer does for Python DDP, written for C++, with a
// communication hook (runner/api/CommHook.h) deciding how each bucket is averaged. Each .grad is a
// view into its bucket (DDP's gradient_as_bucket_view): autograd accumulates straight into the
// bucket, nothing is copied. A single process (no group) reduces nothing.
// Rule: buckets are handed to the hook always in bucket order, so every rank issues the same
// collectives in the same sequence.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>

#include "runner/api/CommHook.h"
#include "runner/api/Model.h"

namespace exprun {

class GradReducer {
 public:
  GradReducer(std::unique_ptr<CommHook> hook, Dist& dist) : hook_(std::move(hook)), dist_(dist) {}
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Lays out the buckets and installs the gradient hooks (after rank 0's weights are broadcast).
  // Parameters are grouped into buckets of about the hook's bucket size in reverse registration
  // order (the order gradients become ready; identical on every rank). With overlap, a post hook on
  // each parameter's gradient accumulator counts the bucket's arrivals and hands a complete bucket
  // to the hook.
  void attach(Model& model);
  // false is no_sync: backward passes accumulate locally and nothing is reduced.
  void setSync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }
  // Completes the reduction of this step's gradients (averaged over ranks, in .grad): hands over
  // what is left (parameters that got no gradient contribute zeros), waits on every bucket's future
  // in order and writes the results back into the buckets. Returns the seconds spent blocked
  // waiting on communication.
  double finish();
  // Seconds the last finish()ed exchange was in flight: from its first bucket handed to the hook
  // (during backward, with overlap) to the end of finish() (0: nothing was exchanged).
  double inFlightSeconds() const { return inFlight_; }
  // True when .grad tensors are views into the buckets: zero them in place, never drop them.
  bool gradsAreViews() const { return views_; }
  CommHook& hook() { return *hook_; }

  // Parameter indices of each bucket (after attach; empty for a single process).
  std::vector<std::vector<std::size_t>> bucketLayout() const;
  // The buckets that attach() makes of `params` for buckets of `bucketMb` MiB.
  static std::vector<std::vector<std::size_t>> layout(const std::vector<torch::Tensor>& params, double bucketMb);

 private:
  struct Slot {
    std::size_t bucket;
    std::int64_t offset, numel;
  };
  struct Bucket {
    std::vector<std::size_t> params;
    GradBucket grads;
    std::size_t pending = 0;  // gradients still to arrive in this step
    std::optional<BucketFuture> future;
  };
  void onGradReady(std::size_t param);
  void launchReady();  // hands consecutive complete buckets to the hook, in order (mu_ held)

  std::unique_ptr<CommHook> hook_;
  Dist& dist_;
  bool sync_ = true;
  bool views_ = false;
  std::vector<torch::Tensor> params_;
  std::vector<Slot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<char> ready_;
  std::size_t nextLaunch_ = 0;
  std::chrono::steady_clock::time_point firstLaunch_;  // of this step's exchange (nextLaunch_ > 0)
  double inFlight_ = 0;
  std::mutex mu_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;  // keep the hooks' nodes alive
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace exprun
