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

}  // namespace

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
  if (!dist_.active()) return;  // a single process: nothing to reduce
  for (auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
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
    b.grads.buffer = torch::zeros({n}, params_[b.params[0]].options());
    b.pending = b.params.size();
    for (std::size_t k : b.params) {  // each .grad becomes a view into its bucket
      const Slot& s = slots_[k];
      auto view = slotView(b.grads.buffer, s.offset, s.numel, params_[k]);
      if (params_[k].grad().defined()) view.copy_(params_[k].grad());
      params_[k].mutable_grad() = view;
      b.grads.gradients.push_back(view);
    }
  }
  views_ = true;
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
  if (!params_[k].grad().is_alias_of(b.grads.buffer))
    b.grads.buffer.narrow(0, s.offset, s.numel).copy_(params_[k].grad().reshape({-1}));
  if (--b.pending == 0) launchReady();
}

void GradReducer::launchReady() {
  while (nextLaunch_ < buckets_.size() && buckets_[nextLaunch_].pending == 0) {
    if (nextLaunch_ == 0) firstLaunch_ = std::chrono::steady_clock::now();
    Bucket& b = buckets_[nextLaunch_++];
    b.future = (*hook_)(b.grads, dist_);
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
      auto slot = b.grads.buffer.narrow(0, s.offset, s.numel);
      if (params_[k].grad().defined()) {
        if (!params_[k].grad().is_alias_of(b.grads.buffer)) slot.copy_(params_[k].grad().reshape({-1}));
      } else {
        slot.zero_();
      }
      ready_[k] = 1;
      --b.pending;
    }
    launchReady();
  }
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
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

std::vector<std::vector<std::size_t>> GradReducer::bucketLayout() const {
  std::vector<std::vector<std::size_t>> out;
  for (const auto& b : buckets_) out.push_back(b.params);
  return out;
}

}  // namespace exprun
