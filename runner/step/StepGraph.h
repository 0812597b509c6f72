// Purpose: train.cuda_graph — the training step captured once in a CUDA graph and replayed, so that
// a step costs a few launches instead of one per kernel (forward, backward, loss scaling, clipping,
// optimizer), as PyTorch's whole-network capture does (torch.cuda.graph; torch.compile's
// "reduce-overhead" mode). The step breakdown shows a replay as one phase, "cuda_graph".
// Rule: the captured step never reads the device from the host (the learning rate comes from a
// tensor, fp16 overflow is skipped on the device); what cannot hold is refused before training
// (whyNoCudaGraph). CUDA-only: without CUDA in the build, StepGraph cannot be made.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runner/api/Method.h"
#include "runner/step/Learner.h"

namespace exprun {

// Why train.cuda_graph cannot be used for this run (empty: it can). `methods`: the run's method
// names; `cyclesMomentum`: the schedule changes the momentum every step (one_cycle).
std::string whyNoCudaGraph(const Spec& spec, const torch::Device& device, bool distributed,
                           const std::vector<std::string>& methods, Optimizer& optimizer, bool cyclesMomentum);

// What StepGraph::plan decides from (a free function, so that the rules are tested on the CPU).
struct StepGraphFacts {
  bool captured = false;   // a graph exists
  bool sameShapes = false; // the batches have its input shapes
  bool sameFixed = false;  // the optimizer's fixed hyperparameters are those it holds
  bool warmed = false;     // the last eager step ran these shapes (cuDNN and cuBLAS have seen them)
  bool larger = false;     // more samples than the captured step
  std::int64_t eagerSteps = 0;
};
enum class StepGraphPlan { Replay, Capture, Eager };
StepGraphPlan planStepGraph(const StepGraphFacts& f, std::int64_t warmupSteps);

// The step's life: the first kWarmupSteps steps run eagerly on a side stream, so that lazy
// initialisation (cuBLAS and cuDNN workspaces, the optimizer's state, the loss scaler's counters)
// happens outside the graph. The next step, once an eager step has run its shapes, is captured on
// that stream into a graph with its own memory pool (the eager steps' cached blocks returned to the
// device first): it reads its micro-batches from static input buffers, writes its sums and per-step
// loss into static Outputs, and zeroes gradients in place so that they keep their addresses.
// Capture records and does not run: the step is then replayed. Every later step with the captured
// shapes copies its batches into the buffers and replays the graph on the step's stream; a step
// with other shapes (an epoch's last, smaller batch) runs eagerly on the side stream; a changed
// fixed hyperparameter (momentum, weight decay, betas) makes the next step capture again.
class StepGraph {
 public:
  static constexpr std::int64_t kWarmupSteps = 3;
  // The step's outputs the graph writes (static: the same tensors every replay).
  struct Outputs {
    torch::Tensor lossSum, correct, normSum;  // this step's: float64, int64, float64 scalars on the device
    torch::Tensor lastLoss;                   // float64 [2]: the step's loss sum and samples (TrainStep::lastLoss)
  };

  StepGraph(Learner& learner, const torch::Device& device);
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Before every step: the groups' learning rates into the tensors the optimizer reads.
  void setLearningRates();
  // Whether the step with these micro-batches replays the graph (captured, same shapes, same fixed
  // hyperparameters), must be captured now (warm-up done, nothing captured fits), or runs eagerly.
  using Plan = StepGraphPlan;
  Plan plan(const std::vector<StepBatch>& batches) const;
  // Runs `work`, the step over `batches`, eagerly on the side stream (the step's stream waits for it).
  void eager(const std::vector<StepBatch>& batches, const std::function<void()>& work);
  // Captures `work(inputs, outputs)` — the step over the static inputs, writing the outputs — with
  // `batches`' shapes; throws std::runtime_error naming what could not be captured.
  void capture(const std::vector<StepBatch>& batches,
               const std::function<void(std::vector<StepBatch>&, Outputs&)>& work);
  // Copies `batches` into the static inputs and replays the captured step on the step's stream.
  void replay(const std::vector<StepBatch>& batches);
  const Outputs& outputs() const { return outputs_; }
  std::int64_t captures() const { return captures_; }
  std::int64_t replays() const { return replays_; }

 private:
  struct Impl;  // the CUDA graph, its stream and pool (StepGraph.cpp)
  static std::vector<std::vector<std::int64_t>> shapesOf(const std::vector<StepBatch>& batches);
  Learner& learner_;
  torch::Device device_;
  std::unique_ptr<Impl> impl_;
  CapturableStep* capturable_ = nullptr;  // the optimizer (checked when made)
  std::vector<torch::Tensor> lrs_;  // float32 per parameter group, on the device
  std::vector<StepBatch> inputs_;   // static input buffers of the captured step
  Outputs outputs_;
  std::vector<double> fixed_;       // the captured step's fixed hyperparameters
  std::vector<std::vector<std::int64_t>> eagerShapes_;  // the last eager step's batch shapes
  std::int64_t eagerSteps_ = 0, captures_ = 0, replays_ = 0;
};

}  // namespace exprun
