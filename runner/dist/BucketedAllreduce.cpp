// Purpose: bucketed, overlapped gradient allreduce (see BucketedAllreduce.h).
#include "runner/dist/BucketedAllreduce.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/variable.h>

#include "runner/metrics/Meters.h"

namespace exprun {

Registry<CommFactory>& commRegistry() {
  static Registry<CommFactory> r("comm");
  return r;
}

namespace {

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

}  // namespace

BucketedAllreduce::~BucketedAllreduce() { *alive_ = false; }

void BucketedAllreduce::attach(Model& model, Dist& dist) {
  dist_ = &dist;
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
  slots_.resize(params_.size());
  ready_.assign(params_.size(), 0);
  // Reverse registration order: roughly the order backward produces gradients.
  double bytes = 0;
  for (size_t k = params_.size(); k-- > 0;) {
    const double pBytes = static_cast<double>(params_[k].numel()) * c10::elementSize(wire_);
    if (buckets_.empty() || (bytes > 0 && bytes + pBytes > bucketBytes_)) {
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    std::int64_t offset = 0;
    for (size_t q : b.params) offset += params_[q].numel();
    slots_[k] = Slot{buckets_.size() - 1, offset, params_[k].numel()};
    b.params.push_back(k);
    bytes += pBytes;
  }
  for (auto& b : buckets_) {
    std::int64_t n = 0;
    for (size_t q : b.params) n += params_[q].numel();
    b.buffer = torch::zeros({n}, params_[b.params[0]].options().dtype(wire_));
    b.pending = b.params.size();
  }
  if (!dist.active()) return;
  views_ = wire_ == params_[0].scalar_type();
  if (views_) {
    torch::NoGradGuard g;
    for (size_t k = 0; k < params_.size(); ++k) {
      const Slot& s = slots_[k];
      auto view = buckets_[s.bucket].buffer.narrow(0, s.offset, s.numel).view(params_[k].sizes());
      if (params_[k].grad().defined()) view.copy_(params_[k].grad());
      params_[k].mutable_grad() = view;
    }
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k]);
    acc->add_post_hook(std::make_unique<GradReadyHook>([this, k] { onGradReady(k); }, alive_));
    accumulators_.push_back(std::move(acc));
  }
}

void BucketedAllreduce::onGradReady(size_t k) {
  if (!sync_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (ready_[k]) return;  // a parameter used twice in the graph fires once per use; the last wins below
  ready_[k] = 1;
  const Slot& s = slots_[k];
  Bucket& b = buckets_[s.bucket];
  if (!views_ || !params_[k].grad().is_alias_of(b.buffer))
    b.buffer.narrow(0, s.offset, s.numel).copy_(params_[k].grad().reshape({-1}));
  if (--b.pending == 0) launchReady();
}

void BucketedAllreduce::launch(Bucket& b) {
  if (wire_ != torch::kFloat32) b.buffer.div_(dist_->worldSize());  // compressed: average before, to keep range
  b.work = dist_->allreduceAsync(b.buffer);
}

void BucketedAllreduce::launchReady() {
  while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].pending == 0) launch(buckets_[nextLaunch_++]);
}

double BucketedAllreduce::finish() {
  if (!dist_ || !dist_->active() || !sync_) return 0.0;
  Stopwatch clock;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Parameters that got no gradient this step: their slot carries their current .grad or zeros.
    for (size_t k = 0; k < params_.size(); ++k) {
      if (ready_[k]) continue;
      const Slot& s = slots_[k];
      Bucket& b = buckets_[s.bucket];
      auto slot = b.buffer.narrow(0, s.offset, s.numel);
      if (params_[k].grad().defined()) {
        if (!params_[k].grad().is_alias_of(b.buffer)) slot.copy_(params_[k].grad().reshape({-1}));
      } else {
        slot.zero_();
      }
      ready_[k] = 1;
      --b.pending;
    }
    launchReady();
  }
  for (auto& b : buckets_) {
    b.work->wait();
    if (wire_ == torch::kFloat32) b.buffer.div_(dist_->worldSize());
    for (size_t k : b.params) {
      const Slot& s = slots_[k];
      auto& p = params_[k];
      if (p.grad().defined() && p.grad().is_alias_of(b.buffer)) continue;  // a view: already reduced in place
      auto reduced = b.buffer.narrow(0, s.offset, s.numel).view(p.sizes());
      if (p.grad().defined())
        p.mutable_grad().copy_(reduced);
      else
        p.mutable_grad() = reduced.to(p.dtype()).clone();
    }
    b.pending = b.params.size();
    b.work.reset();
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  nextLaunch_ = 0;
  return clock.seconds();
}

std::vector<std::vector<size_t>> BucketedAllreduce::bucketLayout() const {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

}  // namespace exprun
