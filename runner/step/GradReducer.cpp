// Purpose: the bucket engine (see GradReducer.h).
#include "runner/step/GradReducer.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include <limits>

#include "runner/metrics/Meters.h"

namespace exprun {

namespace {

// A parameter's slot of a bucket seen as a tensor of the parameter's shape and strides (as PyTorch's
// DDP makes its bucket views): a channels_last weight gets a channels_last gradient, so autograd
// accumulates into it in place (no "gradient layout contract" copy).
torch::Tensor slotView(const torch::Tensor& buffer, std::int64_t offset, std::int64_t numel, const torch::Tensor& param) {
  torch::Tensor flat = buffer.narrow(0, offset, numel);
  if (param.is_contiguous() || !param.unsafeGetTensorImpl()->is_non_overlapping_and_dense())
    return flat.view(param.sizes());
  return flat.as_strided(param.sizes(), param.strides());
}

// Runs after a parameter's AccumulateGrad node: its .grad() holds this backward's gradient.
class GradReadyHook : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(std::function<void()> fn, std::weak_ptr<bool> alive) : fn_(std::move(fn)), alive_(std::move(alive)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto a = alive_.lock(); a && *a) fn_();
    return outputs;
  }

 private:
  std::function<void()> fn_;
  std::weak_ptr<bool> alive_;
};

// A parameter as rows: a 0-dim one is one row of one element.
torch::Tensor asRows(const torch::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

// The shape of `count` rows of `param`.
std::vector<std::int64_t> rowsShape(const torch::Tensor& param, std::int64_t count) {
  std::vector<std::int64_t> shape = asRows(param).sizes().vec();
  shape[0] = count;
  return shape;
}

}  // namespace

ShardStage shardStageNamed(const std::string& name) {
  if (name == "none") return ShardStage::None;
  if (name == "optimizer") return ShardStage::Optimizer;
  if (name == "gradients") return ShardStage::Gradients;
  throw std::invalid_argument("distributed.shard: '" + name + "' is not one of none, optimizer, gradients");
}

GradReducer::~GradReducer() { *alive_ = false; }

std::vector<std::vector<std::size_t>> GradReducer::layout(const std::vector<torch::Tensor>& params, double bucketMb) {
  // Reverse registration order: roughly the order backward produces gradients. A bucket holds one
  // dtype on one device.
  const double limit = bucketMb * 1048576.0;
  std::vector<std::vector<std::size_t>> out;
  double bytes = 0;
  for (std::size_t k = params.size(); k-- > 0;) {
    const double pBytes = static_cast<double>(params[k].numel()) * params[k].element_size();
    const bool sameKind = !out.empty() && params[out.back().front()].scalar_type() == params[k].scalar_type() &&
                          params[out.back().front()].device() == params[k].device();
    if (out.empty() || !sameKind || (bytes > 0 && bytes + pBytes > limit)) {
      out.emplace_back();
      bytes = 0;
    }
    out.back().push_back(k);
    bytes += pBytes;
  }
  return out;
}

void GradReducer::attach(Model& model) {
  for (auto& p : model.named_parameters())
    if (p.value().requires_grad()) {
      params_.push_back(p.value());
      names_.push_back(p.key());
    }
  if (!dist_.active()) return;  // a single process: nothing to reduce
  slots_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  const auto groups = layout(params_, hook_->bucketing().bucketMb);
  buckets_.resize(groups.size());
  torch::NoGradGuard g;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    Bucket& b = buckets_[i];
    b.params = groups[i];
    std::int64_t n = 0;
    for (std::size_t k : b.params) {
      slots_[k] = Slot{i, n, params_[k].numel()};
      n += params_[k].numel();
    }
    b.grads.index = i;
    b.grads.last = i + 1 == groups.size();
    b.pending = b.params.size();
    if (stage_ == ShardStage::Gradients) continue;  // no whole gradients kept: autograd's own, freed when scattered
    b.grads.buffer = torch::zeros({n}, params_[b.params[0]].options());
    for (std::size_t k : b.params) {  // each .grad becomes a view into its bucket
      const Slot& s = slots_[k];
      auto view = slotView(b.grads.buffer, s.offset, s.numel, params_[k]);
      if (params_[k].grad().defined()) view.copy_(params_[k].grad());
      params_[k].mutable_grad() = view;
      b.grads.gradients.push_back(view);
    }
  }
  views_ = stage_ != ShardStage::Gradients;
  if (sharded()) attachShards();
  if (!hook_->bucketing().overlap) return;  // every bucket is handed over in finish()
  for (std::size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<GradReadyHook>([this, k] { onGradReady(k); }, alive_));
    accumulators_.push_back(std::move(acc));
  }
}

void GradReducer::onGradReady(std::size_t k) {
  if (!sync_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_[k]) return;  // AccumulateGrad runs once per backward: a second call is not a new gradient
  ready_[k] = 1;
  const Slot& s = slots_[k];
  Bucket& b = buckets_[s.bucket];
  if (views_ && !params_[k].grad().is_alias_of(b.grads.buffer))
    b.grads.buffer.narrow(0, s.offset, s.numel).copy_(params_[k].grad().reshape({-1}));
  if (--b.pending == 0) launchReady();
}

void GradReducer::launchReady() {
  while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].pending == 0) {
    if (nextLaunch_ == 0) firstLaunch_ = std::chrono::steady_clock::now();
    Bucket& b = buckets_[nextLaunch_++];
    b.future = sharded() ? reduceScatter(b) : (*hook_)(b.grads, dist_);
  }
}

double GradReducer::finish() {
  inFlight_ = 0;
  if (!dist_.active() || !sync_) return 0.0;
  Stopwatch clock;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Parameters that got no gradient this step: their slot carries their current .grad or zeros.
    for (std::size_t k = 0; k < params_.size(); ++k) {
      if (ready_[k]) continue;
      const Slot& s = slots_[k];
      Bucket& b = buckets_[s.bucket];
      if (views_) {  // stage 2 scatters what autograd left (nothing: zeros)
        auto slot = b.grads.buffer.narrow(0, s.offset, s.numel);
        if (params_[k].grad().defined()) {
          if (!params_[k].grad().is_alias_of(b.grads.buffer)) slot.copy_(params_[k].grad().reshape({-1}));
        } else {
          slot.zero_();
        }
      }
      ready_[k] = 1;
      --b.pending;
    }
    launchReady();
  }
  if (sharded()) {
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      Bucket& b = buckets_[i];
      Dist::Waiting waiting(dist_, "the gradient reduce-scatter", static_cast<int>(i), static_cast<int>(buckets_.size()),
                            b.chunk * dist_.worldSize() *
                                static_cast<std::int64_t>(params_[b.params.front()].element_size()));
      b.future->wait();  // the averaged rows are in place (reduceScatter's continuation)
      b.future.reset();
      b.pending = b.params.size();
    }
  }
  for (std::size_t i = 0; !sharded() && i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    Dist::Waiting waiting(dist_, "the gradient all-reduce", static_cast<int>(i), static_cast<int>(buckets_.size()),
                          b.grads.buffer.numel() * static_cast<std::int64_t>(b.grads.buffer.element_size()));
    torch::Tensor result = b.future->wait();
    b.future.reset();
    if (!result.is_same(b.grads.buffer)) b.grads.buffer.copy_(result);
    for (std::size_t k : b.params) {
      auto& p = params_[k];
      if (p.grad().defined() && p.grad().is_alias_of(b.grads.buffer)) continue;  // a view: already in place
      const Slot& s = slots_[k];
      auto reduced = slotView(b.grads.buffer, s.offset, s.numel, p);
      if (p.grad().defined())
        p.mutable_grad().copy_(reduced);
      else
        p.mutable_grad() = reduced.clone();
    }
    b.pending = b.params.size();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  if (nextLaunch_ > 0)
    inFlight_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - firstLaunch_).count();
  nextLaunch_ = 0;
  return clock.seconds();
}

torch::Tensor GradReducer::chunkRows(const torch::Tensor& flat, std::int64_t chunkStart, std::size_t k,
                                     std::int64_t count) const {
  const Slot& s = slots_[k];
  return flat.narrow(0, chunkStart + s.chunkOffset, count * s.rowNumel).view(rowsShape(params_[k], count));
}

std::int64_t GradReducer::parameterRows(std::size_t k) const { return asRows(params_[k]).size(0); }

std::pair<std::int64_t, std::int64_t> GradReducer::rowsOf(std::size_t k, int r) const {
  const Slot& s = slots_[k];
  const std::int64_t first = std::min<std::int64_t>(s.rows, s.perRank * r);
  return {first, std::min<std::int64_t>(s.rows, first + s.perRank) - first};
}

void GradReducer::attachShards() {
  const int world = dist_.worldSize(), me = dist_.rank();
  torch::NoGradGuard g;
  shards_.assign(params_.size(), torch::Tensor());
  for (Bucket& b : buckets_) {
    b.chunk = 0;
    for (std::size_t k : b.params) {
      Slot& s = slots_[k];
      s.rows = parameterRows(k);
      s.rowNumel = s.rows > 0 ? s.numel / s.rows : 0;
      s.perRank = (s.rows + world - 1) / world;
      s.chunkOffset = b.chunk;
      b.chunk += s.perRank * s.rowNumel;
    }
    const auto opts = params_[b.params.front()].options();
    if (stage_ == ShardStage::Gradients) b.shardGrad = torch::zeros({b.chunk}, opts);
    for (std::size_t k : b.params) {
      const auto [first, count] = rowsOf(k, me);
      // A view of the parameter's own rows: the optimizer's in-place step writes the parameter.
      torch::Tensor shard = asRows(params_[k].detach()).narrow(0, first, count);
      shard.requires_grad_(true);
      shard.mutable_grad() = stage_ == ShardStage::Gradients ? chunkRows(b.shardGrad, 0, k, count)
                                                             : asRows(params_[k].grad()).narrow(0, first, count);
      shards_[k] = shard;
    }
  }
}

NamedParameters GradReducer::shards() const {
  NamedParameters out;
  for (std::size_t k = 0; k < params_.size(); ++k) out.insert(names_[k], sharded() ? shards_[k] : params_[k]);
  return out;
}

BucketFuture GradReducer::reduceScatter(Bucket& b) {
  const int world = dist_.worldSize(), me = dist_.rank();
  torch::NoGradGuard g;
  const auto opts = params_[b.params.front()].options();
  // Rank-major: rank r's chunk holds rows r*s.. of each parameter of the bucket (zeros past the end).
  torch::Tensor input = torch::zeros({b.chunk * world}, opts);
  for (std::size_t k : b.params) {
    const torch::Tensor grad = params_[k].grad();
    if (!grad.defined()) continue;  // no gradient this step: zeros
    for (int r = 0; r < world; ++r) {
      const auto [first, count] = rowsOf(k, r);
      if (count > 0) chunkRows(input, r * b.chunk, k, count).copy_(asRows(grad).narrow(0, first, count));
    }
    if (stage_ == ShardStage::Gradients) params_[k].mutable_grad() = torch::Tensor();  // freed: the shard is what stays
  }
  torch::Tensor out = stage_ == ShardStage::Gradients ? b.shardGrad : torch::empty({b.chunk}, opts);
  auto work = dist_.reduceScatterAsync(out, input);
  const double world_d = static_cast<double>(world);
  return BucketFuture(work, [this, &b, out, input, world_d, me]() mutable {
    out.div_(world_d);  // the mean over ranks, as DDP's average
    if (stage_ == ShardStage::Optimizer) {  // into this rank's rows of the whole gradients (the shards' .grad)
      for (std::size_t k : b.params) {
        const auto [first, count] = rowsOf(k, me);
        if (count > 0) asRows(params_[k].grad()).narrow(0, first, count).copy_(chunkRows(out, 0, k, count));
      }
    }
    input = torch::Tensor();
    return out;
  });
}

void GradReducer::gatherParameters() {
  if (!sharded()) return;
  const int world = dist_.worldSize(), me = dist_.rank();
  torch::NoGradGuard g;
  struct Pending {
    torch::Tensor out;
    c10::intrusive_ptr<c10d::Work> work;
  };
  std::vector<Pending> pending;
  for (Bucket& b : buckets_) {  // every bucket's gather in flight, then each written back in order
    const auto opts = params_[b.params.front()].options();
    torch::Tensor in = torch::zeros({b.chunk}, opts);
    for (std::size_t k : b.params) {
      const auto [first, count] = rowsOf(k, me);
      if (count > 0) chunkRows(in, 0, k, count).copy_(asRows(params_[k].detach()).narrow(0, first, count));
    }
    torch::Tensor out = torch::empty({b.chunk * world}, opts);
    pending.push_back({out, dist_.allgatherAsync(out, in)});
  }
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = buckets_[i];
    {
      Dist::Waiting waiting(dist_, "the parameter all-gather", static_cast<int>(i), static_cast<int>(buckets_.size()),
                            pending[i].out.numel() * static_cast<std::int64_t>(pending[i].out.element_size()));
      pending[i].work->wait();
    }
    for (std::size_t k : b.params)
      for (int r = 0; r < world; ++r) {
        const auto [first, count] = rowsOf(k, r);
        if (r != me && count > 0)
          asRows(params_[k].detach()).narrow(0, first, count).copy_(chunkRows(pending[i].out, r * b.chunk, k, count));
      }
  }
}

void GradReducer::zeroModelGrads() {
  for (auto& p : params_) {
    if (!p.grad().defined()) continue;
    if (views_)
      p.mutable_grad().zero_();
    else
      p.mutable_grad() = torch::Tensor();
  }
}

std::int64_t GradReducer::parameterBytes() const {
  std::int64_t n = 0;
  for (const auto& p : params_) n += static_cast<std::int64_t>(p.nbytes());
  return n;
}

std::int64_t GradReducer::gradientBytes() const {
  std::int64_t n = 0;
  if (buckets_.empty()) {  // a single process: autograd's own gradients
    for (const auto& p : params_)
      if (p.grad().defined()) n += static_cast<std::int64_t>(p.grad().nbytes());
    return n;
  }
  for (const auto& b : buckets_) {
    if (b.grads.buffer.defined()) n += static_cast<std::int64_t>(b.grads.buffer.nbytes());
    if (b.shardGrad.defined()) n += static_cast<std::int64_t>(b.shardGrad.nbytes());
  }
  return n;
}

std::vector<std::vector<std::size_t>> GradReducer::bucketLayout() const {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

}  // namespace exprun
