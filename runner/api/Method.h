// Purpose: the `method` plugin kind — a training method that acts on a run at the points the loop
// already has: mixup and CutMix on a batch, a pruning step before an epoch, quantization-aware
// fine-tuning's forward, an int8 conversion after training, synchronized batch norm. A method is one
// file in plugins/methods/ plus one test; it reaches the run only through RunContext and its events,
// saves its checkpoint entry with state()/restore() and reports through figures() and its columns.
// Rule: random choices are drawn from (seed, epoch, step or sample), never from a generator whose
// state depends on the number of ranks, so N ranks and a resumed run choose what one process did.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/api/Data.h"
#include "runner/api/Kinds.h"
#include "runner/api/Model.h"
#include "runner/api/Optimizer.h"
#include "runner/api/Registry.h"
#include "runner/dist/Dist.h"
#include "runner/metrics/Flops.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"
#include "runner/spec/Spec.h"

namespace exprun {

// An evaluation's figures on the test split.
struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
};

using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

// A micro-batch as a training step sees it: on the device, before the forward.
struct StepBatch {
  torch::Tensor x;     // the inputs [N, C, H, W]
  torch::Tensor y;     // int64 [N] labels
  torch::Tensor soft;  // float [N, classes] target distributions (mixup); undefined: the labels
  std::int64_t step = 0, epoch = 0;  // the optimizer step (0-based) and its epoch (1-based)
  std::int64_t micro = 0;            // the micro-batch's index within the step (accumulation)
  // The labels training Top-1 is counted against: y, or the most weighted class of the soft targets.
  torch::Tensor labels() const { return soft.defined() ? soft.argmax(1) : y; }
};

// What a method may see and do to the run it acts on (implemented by the trainer).
class RunContext {
 public:
  virtual ~RunContext() = default;
  virtual const Spec& spec() const = 0;  // as trained (a memory plan applied)
  virtual Dist& dist() = 0;
  virtual torch::Device device() const = 0;
  virtual Model& model() = 0;
  virtual DataInfo dataInfo() const = 0;
  virtual const RunPaths& paths() const = 0;
  // The run's records so far (the last epoch's Top-1, ...).
  virtual const std::vector<EpochRecord>& epochs() const = 0;
  // A model of the spec built apart from the run (full width, on the CPU), without changing the
  // run's random stream.
  virtual std::shared_ptr<Model> freshModel() = 0;
  // The run's data plugin (both splits; a method may change its training images between epochs
  // with setTrainSize, then tells the run: dataChanged).
  virtual Dataset& data() = 0;
  // The FLOPs per image one training step of the model counts now (MFU's numerator).
  virtual StepFlops flops() const = 0;
  // Collective: evaluation on the test split, sharded over the ranks, with `forward` (empty: the
  // training forward, a method's if one gives it), in the run's precision.
  virtual EvalResult evaluate(const Forward& forward = {}) = 0;

  // Events: a method changed part of the run, and the run re-derives what depends on that part.
  // The model's parts changed shape (channels removed): the optimizer (its state starts afresh),
  // the gradient reducer's buckets and the EMA are rebuilt; `flops`: a training step's FLOPs per
  // image of the model as it is now (counted by the method, on a throwaway model of that shape).
  virtual void modelChanged(const StepFlops& flops) = 0;
  // The data plugin's training batches changed (Dataset::setTrainSize): the FLOPs per image are
  // counted again at its trainSize(), on a full-width model of the spec.
  virtual void dataChanged() = 0;
  // Compare these models: the run's comparison (the result file's "compression": full width,
  // pruned, int8, ...), the rows so far and one more (collective callers add the same rows on
  // every rank).
  virtual const std::vector<CompressedModel>& comparedModels() const = 0;
  virtual void compareModel(CompressedModel row) = 0;
};

// A training method; a spec lists its methods in the order they act (`methods: [{type: mixup, ...}]`).
// Its check of the whole spec is its PluginInfo's SpecCheck, run when the spec is loaded, so a bad
// combination exits 2 before anything is trained. Hooks, in the order a run calls them (every hook
// is called on every rank, in the spec's order of the methods; those marked collective must make
// the same collective calls on every rank):
//   setUp          after the run is set up, before a checkpoint is restored (the model as built)
//   restore        a checkpoint's entry for the method, before the checkpoint's tensors are read
//   begin          training begins or resumes
//   beforeEpoch    (collective) before an epoch's first step
//   onBatch        every micro-batch, on the device, before the forward: inputs and targets
//   forward        every forward, training and evaluation: the model's output, if the method
//                  computes it (the first method that does)
//   loss           every micro-batch's loss (soft targets are in the batch)
//   beforeOptimizerStep / afterOptimizerStep   around the optimizer's step (after unscaling; with
//                                              fp16 skipped on the device, also before a step the
//                                              device then skips)
//   afterEpoch     (collective) the epoch's record, after its evaluation
//   afterTraining  (collective) after the last epoch (not when the run was interrupted)
// What it saves is its checkpoint entry (state(), restore()); what it measured is its section of
// the result file (figures(), under "methods": {"<type>": ...}) and the ResultColumns it registers.
class Method {
 public:
  virtual ~Method() = default;
  virtual void setUp(RunContext& run) { (void)run; }
  // `state`: what state() returned when the checkpoint was saved.
  virtual void restore(RunContext& run, const nlohmann::json& state) {
    (void)run;
    (void)state;
  }
  virtual void begin(RunContext& run) { (void)run; }
  // `fresh`: the epoch starts at its beginning (not resumed inside it).
  virtual void beforeEpoch(RunContext& run, std::int64_t epoch, bool fresh) {
    (void)run;
    (void)epoch;
    (void)fresh;
  }
  virtual void onBatch(StepBatch& batch) { (void)batch; }
  // The model's output for `x` computed by the method in place of the model's own forward, on the
  // model's parameters (quantization-aware fine-tuning's fake-quantized forward), in training and
  // evaluation; nullopt: the model's (or the next method's).
  virtual std::optional<torch::Tensor> forward(const torch::Tensor& x) {
    (void)x;
    return std::nullopt;
  }
  // The micro-batch's loss (a scalar), given its logits; returns the loss to train on.
  virtual torch::Tensor loss(const torch::Tensor& loss, const torch::Tensor& logits, const StepBatch& batch) {
    (void)logits;
    (void)batch;
    return loss;
  }
  // After the gradients are reduced and unscaled, before clipping; `step` is 0-based.
  virtual void beforeOptimizerStep(std::int64_t step) { (void)step; }
  virtual void afterOptimizerStep(std::int64_t step) { (void)step; }
  virtual void afterEpoch(RunContext& run, EpochRecord& record) {
    (void)run;
    (void)record;
  }
  virtual void afterTraining(RunContext& run) { (void)run; }
  // The method's entry in a checkpoint (null: it saves nothing).
  virtual nlohmann::json state() const { return nullptr; }
  // The method's section of the result file (null: none).
  virtual nlohmann::json figures() const { return nullptr; }
};

// A spec's methods, built in its order; each hook calls them in turn.
class Methods {
 public:
  Methods() = default;
  explicit Methods(const std::vector<Options>& nodes);
  bool empty() const { return list_.empty(); }
  std::size_t size() const { return list_.size(); }
  // The i-th method and its type (the spec's name for it, the key of its entries).
  Method& at(std::size_t i) { return *list_[i].second; }
  const std::string& type(std::size_t i) const { return list_[i].first; }
  // Every method, with its type.
  template <class F>
  void each(F&& f) {
    for (auto& [type, m] : list_) f(type, *m);
  }
  void onBatch(StepBatch& b) {
    for (auto& [type, m] : list_) m->onBatch(b);
  }
  // The first method's forward that gives one, else the model's.
  torch::Tensor forward(const torch::Tensor& x, Model& model) {
    for (auto& [type, m] : list_)
      if (std::optional<torch::Tensor> out = m->forward(x)) return std::move(*out);
    return model.forward(x);
  }
  torch::Tensor loss(torch::Tensor loss, const torch::Tensor& logits, const StepBatch& b) {
    for (auto& [type, m] : list_) loss = m->loss(loss, logits, b);
    return loss;
  }
  void beforeOptimizerStep(std::int64_t step) {
    for (auto& [type, m] : list_) m->beforeOptimizerStep(step);
  }
  void afterOptimizerStep(std::int64_t step) {
    for (auto& [type, m] : list_) m->afterOptimizerStep(step);
  }
  // Every method's state() that is not null, by type (a checkpoint's "methods" entry).
  nlohmann::json states() const;
  // Every method's figures() that are not null, by type (the result file's "methods" section).
  nlohmann::json figures() const;

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Method>>> list_;
};

}  // namespace exprun
