// Purpose: the automatic memory planner. Given a per-process memory budget and a target global
// batch, it finds the largest micro-batch whose measured peak stays under the budget and sets
// `accumulate` so micro x processes x accumulate is the global batch.
// Rule: it measures the trainer's own step on the trainer's own parts (so a plan includes the loss
// scaler, channels_last weights, label smoothing, comm buckets and EMA); all ranks agree (the
// minimum over ranks).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runner/dist/Dist.h"
#include "runner/spec/Spec.h"
#include "runner/util/Format.h"  // parseBytes

namespace exprun {

struct Probe {
  std::int64_t batch = 0;
  std::int64_t peakBytes = -1;  // -1: out of memory (on CUDA: the input's device memory included)
  bool fits = false;
};

struct MemoryPlan {
  std::int64_t budgetBytes = 0;
  std::int64_t largestFitting = 0;  // the largest micro-batch the global batch allows found to fit
  std::int64_t microBatch = 0;
  std::int64_t accumulate = 1;
  std::int64_t globalBatch = 0;
  Precision precision = Precision::Fp32;
  std::vector<std::string> recomputed;  // stages recomputed in backward (activation_checkpointing)
  std::int64_t recomputeEvery = 0;      // blocks per recomputed segment (activation_checkpointing_every)
  std::vector<std::string> techniques;  // what had to be added to fit ("bf16", "activation_checkpointing")
  std::vector<Probe> probes;
  nlohmann::json toJson() const;
  std::string table() const;
};

// Peak bytes of a few training steps at (micro-batch, precision, recomputed stages); -1: OOM.
using ProbeFn = std::function<std::int64_t(std::int64_t, Precision, const std::vector<std::string>&)>;

// Plans for `spec` on `device` (the spec's model, optimizer, precision and data shape), measuring
// with real steps unless `probe` is given (tests): three steps per micro-batch size, doubling, then
// bisection; peak memory is the caching allocator's on CUDA (catching out-of-memory) and the peak
// resident set on the CPU. The micro-batch must stay under the budget minus a 10 % safety margin. If
// even batch 1 does not fit it retries with, in order, bf16 autocast and recomputation of every
// stage (activation_checkpointing), and says which were needed. On CUDA a probe's peak includes
// what the device holds beside the step (deviceExtras: the batches copied ahead, the data plugin's
// own memory from `data`, loaded, where given, and train.cuda_graph's eager step). Throws
// std::invalid_argument when nothing fits.
MemoryPlan planMemory(const Spec& spec, std::int64_t budgetBytes, std::int64_t globalBatch, Dist& dist,
                      const torch::Device& device, const ProbeFn& probe = nullptr, const Dataset* data = nullptr);

// The spec with the plan's micro-batch, accumulation, precision and recomputed stages set.
Spec applyPlan(Spec spec, const MemoryPlan& plan);

}  // namespace exprun
