// Purpose: the bucket engine — what c10d's Reducer does for Python DDP, with a comm hook
// (runner/api/CommHook.h) averaging each bucket; each .grad is a view into its bucket (DDP's
// gradient_as_bucket_view). Sharded (distributed.shard, ZeRO stages 1-2 in FSDP2's layout: each
// parameter's rows split over the ranks), a complete bucket is reduce-scattered into this rank's
// rows, the optimizer steps those (shards()), gatherParameters() all-gathers them; stage 2 frees
// the whole gradients once scattered. A single process reduces nothing.
// Rule: buckets are handed over always in bucket order, so every rank issues the same
// collectives in the same sequence.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "runner/api/CommHook.h"
#include "runner/api/Model.h"

namespace exprun {

// What each rank holds only its share of: none (DDP), the optimizer's state, the gradients too.
enum class ShardStage { None = 0, Optimizer = 1, Gradients = 2 };
ShardStage shardStageNamed(const std::string& name);  // distributed.shard's values

class GradReducer {
 public:
  GradReducer(std::unique_ptr<CommHook> hook, Dist& dist, ShardStage shard = ShardStage::None)
      : hook_(std::move(hook)), dist_(dist), requested_(shard), stage_(dist.active() ? shard : ShardStage::None) {}
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

  // Sharding (after attach). A single process shards nothing, but keeps the sharded checkpoint
  // format (shardedState(): one shard of every row), so that it resumes a sharded run and back.
  ShardStage stage() const { return stage_; }
  bool sharded() const { return stage_ != ShardStage::None; }
  bool shardedState() const { return requested_ != ShardStage::None; }
  // This rank's rows of each trainable parameter, in the model's order and named as it (possibly
  // no rows): views of the parameter's storage that the optimizer steps in place, their .grad this
  // rank's rows of the averaged gradient after finish().
  NamedParameters shards() const;
  // Shard k's rows of its parameter: {first, count}; and the parameter's rows.
  std::pair<std::int64_t, std::int64_t> shardRows(std::size_t k) const {
    return sharded() ? rowsOf(k, dist_.rank()) : std::pair<std::int64_t, std::int64_t>{0, parameterRows(k)};
  }
  std::int64_t parameterRows(std::size_t k) const;
  // After the optimizer stepped the shards: every rank's rows all-gathered into the parameters.
  void gatherParameters();
  // Resets the model's gradients before a step: zeroed in place where they are bucket views,
  // dropped where they are not (stage 2 frees them).
  void zeroModelGrads();
  // Bytes this rank holds between steps for the parameters and the gradients (the optimizer's
  // state is the optimizer's).
  std::int64_t parameterBytes() const;
  std::int64_t gradientBytes() const;

  // Parameter indices of each bucket (after attach; empty for a single process).
  std::vector<std::vector<std::size_t>> bucketLayout() const;
  // The buckets that attach() makes of `params` for buckets of `bucketMb` MiB.
  static std::vector<std::vector<std::size_t>> layout(const std::vector<torch::Tensor>& params, double bucketMb);

 private:
  struct Slot {
    std::size_t bucket;
    std::int64_t offset, numel;
    // Sharded: the parameter's rows, rows per rank, elements per row, offset in the bucket's chunk.
    std::int64_t rows = 0, perRank = 0, rowNumel = 0, chunkOffset = 0;
  };
  struct Bucket {
    std::vector<std::size_t> params;
    GradBucket grads;
    std::size_t pending = 0;  // gradients still to arrive in this step
    std::optional<BucketFuture> future;
    std::int64_t chunk = 0;   // sharded: elements of each rank's chunk
    torch::Tensor shardGrad;  // stage 2: this rank's chunk of the averaged gradients (persistent)
  };
  void onGradReady(std::size_t param);
  void launchReady();  // hands consecutive complete buckets to the hook, in order (mu_ held)
  BucketFuture reduceScatter(Bucket& b);  // sharded: the bucket's rank-major copy, averaged into this rank's chunk
  void attachShards();
  // Rows [first, first + count) of parameter k's rows that rank r owns.
  std::pair<std::int64_t, std::int64_t> rowsOf(std::size_t k, int r) const;
  // `count` rows of parameter k in a flat rank-major buffer, the rank's chunk starting at `chunkStart`.
  torch::Tensor chunkRows(const torch::Tensor& flat, std::int64_t chunkStart, std::size_t k, std::int64_t count) const;

  std::unique_ptr<CommHook> hook_;
  Dist& dist_;
  ShardStage requested_, stage_;
  std::vector<torch::Tensor> shards_;  // sharded: parameter k's rows on this rank (see shards())
  std::vector<std::string> names_;
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
