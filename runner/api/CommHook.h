// Purpose: the `comm` plugin kind — a communication hook, as PyTorch's DDP comm hooks are: a
// function of one bucket of gradients that starts averaging it over the ranks and returns a
// future of the averaged bucket. The bucket engine (runner/step/GradReducer.h) groups gradients into buckets,
// calls the hook for each bucket in the same order on every rank, waits on the futures and writes
// the results back; it knows nothing of any strategy. A hook that needs several collectives (e.g.
// PowerSGD) issues the later ones in its future's continuation, which runs on the waiting thread,
// in bucket order, so every rank issues its collectives in the same sequence.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"
#include "runner/dist/Dist.h"
#include "runner/spec/OptionTable.h"

namespace exprun {

// One bucket of gradients, as a hook sees it (PyTorch's GradBucket).
struct GradBucket {
  std::size_t index = 0;                 // launch order, identical on every rank
  bool last = false;                     // the last bucket of the step
  torch::Tensor buffer;                  // the bucket's gradients, flat, in the parameters' dtype
  std::vector<torch::Tensor> gradients;  // views of `buffer`, shaped like their parameters
};

// The reduction of one bucket in flight.
class BucketFuture {
 public:
  // Already complete: `value` is the result.
  static BucketFuture ready(torch::Tensor value);
  // Complete when `work` is, then `then` (on the waiting thread) returns the result.
  BucketFuture(c10::intrusive_ptr<c10d::Work> work, std::function<torch::Tensor()> then)
      : work_(std::move(work)), then_(std::move(then)) {}
  // Blocks until done; returns the bucket averaged over the ranks (flat, the bucket's length, any
  // floating dtype; it may be the bucket's buffer itself).
  torch::Tensor wait();

 private:
  BucketFuture() = default;
  c10::intrusive_ptr<c10d::Work> work_;
  std::function<torch::Tensor()> then_;
  torch::Tensor value_;
};

// The option every bucketed hook has: bucket_mb (25 MiB, as DDP's bucket_cap_mb).
struct BucketSettings {
  double bucketMb = 25.0;
};
const OptionTable<BucketSettings>& bucketOptions();

// How the engine buckets gradients for a hook.
struct Bucketing {
  double bucketMb = 25.0;  // bucket size in MiB of gradients (infinity: one bucket per dtype and device)
  bool overlap = true;     // launch each bucket during backward as soon as it is complete (else after backward)
};

class CommHook {
 public:
  virtual ~CommHook() = default;
  virtual Bucketing bucketing() const { return {}; }
  // Whether the hook only averages (allreduce): sharding (distributed.shard) then reduce-scatters
  // its buckets instead; a hook that compresses or keeps state cannot shard.
  virtual bool plainAverage() const { return false; }
  // Bucket in, future out: called once per bucket and synchronised step, in bucket order.
  virtual BucketFuture operator()(GradBucket& bucket, Dist& dist) = 0;
  // The memory planner probes a hook's steady state: a hook whose first steps differ (PowerSGD's
  // plain allreduce before start_iter) moves on to the steps that follow.
  virtual void steadyState() {}
  // State that must survive a checkpoint (this rank's), as named tensors; restored by name.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state() const { return {}; }
  virtual void loadState(const std::vector<std::pair<std::string, torch::Tensor>>& /*state*/) {}
};

// The hook of plain averaging: an in-place SUM allreduce of `t`, divided by the world size when it
// completes (what PyTorch's allreduce_hook does).
BucketFuture allreduceAverage(torch::Tensor t, Dist& dist);

}  // namespace exprun
