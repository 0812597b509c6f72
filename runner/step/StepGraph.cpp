// Purpose: the training step in a CUDA graph (StepGraph.h).
#include "runner/step/StepGraph.h"

#include <stdexcept>

#include "runner/metrics/Phases.h"
#include "runner/util/Log.h"

#if defined(EXPRUN_WITH_CUDA)
#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace exprun {

std::string whyNoCudaGraph(const Spec& spec, const torch::Device& device, bool distributed,
                           const std::vector<std::string>& methods, Optimizer& optimizer, bool cyclesMomentum) {
#if !defined(EXPRUN_WITH_CUDA)
  (void)spec, (void)device, (void)distributed, (void)methods, (void)optimizer, (void)cyclesMomentum;
  return "this exprun was built without CUDA";
#else
  if (!device.is_cuda()) return "the run trains on " + device.str() + ", and CUDA graphs need a CUDA device";
  if (distributed)
    return "the run has several processes; the gradient exchange is not captured (one process only for now)";
  if (!methods.empty()) {
    std::string names;
    for (const auto& m : methods) names += (names.empty() ? "" : ", ") + m;
    return "method(s) " + names + " act on the step from the host; the graph replays it unchanged (no methods)";
  }
  const TrainConfig& t = spec.train;
  if (t.numerics.precision != Precision::Fp16 && t.rules.onNonFinite == NonFinitePolicy::Skip)
    return "train.on_nonfinite: skip decides on the host at every step without fp16's loss scaling (use abort, which "
           "the device records)";
  auto* capturable = dynamic_cast<CapturableStep*>(&optimizer.torchOptimizer());
  if (!capturable) return "optimizer '" + spec.optimizer.type() + "' cannot read its learning rate from the device";
  // Before the first step no parameter has a gradient: only the optimizer's implementation can
  // refuse here (its state is the warm-up's to make).
  if (const std::string why = capturable->whyNotCapturable(); !why.empty()) return why;
  if (t.numerics.precision == Precision::Fp16 && !dynamic_cast<SkipsOnDevice*>(&optimizer.torchOptimizer()))
    return "fp16 loss scaling needs an optimizer that skips an overflowing step on the device";
  if (cyclesMomentum)
    return "the scheduler changes the momentum at every step, which the graph holds fixed (one_cycle: "
           "cycle_momentum: false)";
  return "";
#endif
}

#if defined(EXPRUN_WITH_CUDA)
struct StepGraph::Impl {
  explicit Impl(const torch::Device& device) : side(c10::cuda::getStreamFromPool(false, device.index())) {}
  c10::cuda::CUDAStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;

  // `work` on the side stream, ordered after the step stream's work so far and before its next.
  void onSide(const std::function<void()>& work) {
    const c10::cuda::CUDAGuard onDevice(side.device_index());
    c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(side.device_index());
    at::cuda::CUDAEvent ready;
    ready.record(main);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      work();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(main);
  }
};
#else
struct StepGraph::Impl {};
#endif

StepGraph::StepGraph(Learner& learner, const torch::Device& device) : learner_(learner), device_(device) {
#if !defined(EXPRUN_WITH_CUDA)
  throw std::invalid_argument("train.cuda_graph: this exprun was built without CUDA");
#else
  if (!device.is_cuda()) throw std::invalid_argument("train.cuda_graph: needs a CUDA device");
  impl_ = std::make_unique<Impl>(device);
  capturable_ = dynamic_cast<CapturableStep*>(&learner_.optimizer->torchOptimizer());
  if (!capturable_) throw std::invalid_argument("train.cuda_graph: the optimizer cannot read its learning rate from the device");
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  for (std::size_t i = 0; i < learner_.optimizer->torchOptimizer().param_groups().size(); ++i)
    lrs_.push_back(torch::zeros({}, f32));
  capturable_->readLrFrom(lrs_);
  const auto f64 = f32.dtype(torch::kFloat64);
  outputs_.lossSum = torch::zeros({}, f64);
  outputs_.correct = torch::zeros({}, f64.dtype(torch::kInt64));
  outputs_.normSum = torch::zeros({}, f64);
  outputs_.lastLoss = torch::zeros({2}, f64);
#endif
}

StepGraph::~StepGraph() {
  if (capturable_) capturable_->readLrFrom({});
}

void StepGraph::setLearningRates() {
  auto& groups = learner_.optimizer->torchOptimizer().param_groups();
  for (std::size_t i = 0; i < groups.size() && i < lrs_.size(); ++i) lrs_[i].fill_(groups[i].options().get_lr());
}

StepGraphPlan planStepGraph(const StepGraphFacts& f, std::int64_t warmupSteps) {
  if (f.captured && f.sameShapes && f.sameFixed) return StepGraphPlan::Replay;
  if (f.eagerSteps < warmupSteps) return StepGraphPlan::Eager;
  // Capture the shapes steps mostly have: the first step after the warm-up; again where the fixed
  // hyperparameters changed, or where the first was an epoch's smaller last step and this one is
  // larger; only shapes the last eager step ran. Other steps (an epoch's last, smaller one, or the
  // eager step before a capture) run eagerly.
  if (f.warmed && (!f.captured || (f.sameShapes && !f.sameFixed) || (!f.sameShapes && f.larger)))
    return StepGraphPlan::Capture;
  return StepGraphPlan::Eager;
}

StepGraph::Plan StepGraph::plan(const std::vector<StepBatch>& batches) const {
  StepGraphFacts f;
  f.sameShapes = inputs_.size() == batches.size();
  for (std::size_t i = 0; f.sameShapes && i < batches.size(); ++i)
    f.sameShapes = inputs_[i].x.sizes() == batches[i].x.sizes() && inputs_[i].y.sizes() == batches[i].y.sizes() &&
                   inputs_[i].x.scalar_type() == batches[i].x.scalar_type() &&
                   inputs_[i].x.is_contiguous(at::MemoryFormat::ChannelsLast) ==
                       batches[i].x.is_contiguous(at::MemoryFormat::ChannelsLast);
#if defined(EXPRUN_WITH_CUDA)
  f.captured = impl_->graph != nullptr;
#endif
  auto samples = [](const std::vector<StepBatch>& bs) {
    std::int64_t n = 0;
    for (const auto& b : bs) n += b.y.size(0);
    return n;
  };
  f.sameFixed = capturable_->fixedHyperparameters() == fixed_;
  f.warmed = shapesOf(batches) == eagerShapes_;
  f.larger = samples(batches) > samples(inputs_);
  f.eagerSteps = eagerSteps_;
  return planStepGraph(f, kWarmupSteps);
}

std::vector<std::vector<std::int64_t>> StepGraph::shapesOf(const std::vector<StepBatch>& batches) {
  std::vector<std::vector<std::int64_t>> v;
  for (const auto& b : batches) {
    v.push_back(b.x.sizes().vec());
    v.back().push_back(b.x.is_contiguous(at::MemoryFormat::ChannelsLast) ? 1 : 0);
  }
  return v;
}

void StepGraph::eager(const std::vector<StepBatch>& batches, const std::function<void()>& work) {
#if defined(EXPRUN_WITH_CUDA)
  impl_->onSide(work);
  ++eagerSteps_;
  eagerShapes_ = shapesOf(batches);
#else
  (void)batches, (void)work;
#endif
}

void StepGraph::capture(const std::vector<StepBatch>& batches,
                        const std::function<void(std::vector<StepBatch>&, Outputs&)>& work) {
#if defined(EXPRUN_WITH_CUDA)
  if (const std::string why = capturable_->whyNotCapturable(); !why.empty())
    throw std::runtime_error("train.cuda_graph: the step cannot be captured: " + why);
  const bool again = impl_->graph != nullptr;
  impl_->graph.reset();
  inputs_.clear();
  for (const auto& b : batches) {
    StepBatch s = b;
    s.x = torch::empty_like(b.x);  // the layout kept (channels_last)
    s.y = torch::empty_like(b.y);
    s.soft = torch::Tensor();
    inputs_.push_back(s);
  }
  for (std::size_t i = 0; i < batches.size(); ++i) {
    inputs_[i].x.copy_(batches[i].x);
    inputs_[i].y.copy_(batches[i].y);
  }
  // The cached blocks of the eager steps go back to the device: the capture allocates the step's
  // memory again, in its own pool, and cannot free cached blocks while it runs.
  c10::cuda::device_synchronize();
  c10::cuda::CUDACachingAllocator::emptyCache();
  auto graph = std::make_unique<at::cuda::CUDAGraph>();
  const at::cuda::MempoolId_t pool = at::cuda::graph_pool_handle();  // a fresh pool each capture
  ActivePhaseClock noClock(nullptr);  // no events recorded inside the graph
  const bool cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);  // casts made inside the graph, every replay
  std::string failed;
  impl_->onSide([&] {
    // Relaxed: the loader's threads may pin memory while the step is being captured.
    graph->capture_begin(pool, cudaStreamCaptureModeRelaxed);
    try {
      work(inputs_, outputs_);
    } catch (const std::exception& e) {
      failed = e.what();
    }
    try {
      graph->capture_end();
    } catch (const std::exception& e) {
      if (failed.empty()) failed = e.what();
    }
  });
  at::autocast::set_autocast_cache_enabled(cache);
  if (!failed.empty())
    throw std::runtime_error("train.cuda_graph: the step could not be captured (something in it waits for the "
                             "device or cannot run in a graph): " + failed);
  impl_->graph = std::move(graph);
  fixed_ = capturable_->fixedHyperparameters();
  ++captures_;
  if (again)
    log::info(strf("train.cuda_graph: step captured again (capture %lld): a larger batch or a changed fixed "
                   "hyperparameter (momentum, weight decay, betas)",
                   static_cast<long long>(captures_)));
#else
  (void)batches, (void)work;
#endif
}

void StepGraph::replay(const std::vector<StepBatch>& batches) {
#if defined(EXPRUN_WITH_CUDA)
  for (std::size_t i = 0; i < batches.size(); ++i) {
    inputs_[i].x.copy_(batches[i].x);
    inputs_[i].y.copy_(batches[i].y);
  }
  impl_->graph->replay();
  capturable_->replayed();
  ++replays_;
#else
  (void)batches;
#endif
}

}  // namespace exprun
