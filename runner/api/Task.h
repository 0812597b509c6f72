// Purpose: the `task` plugin kind's interface — what is learned: the loss over a batch's units
// (samples, or tokens), the correct predictions the metrics count, the unit throughput is counted
// in, and the probe batch that FLOPs, memory planning and profiling run. A spec without `task` gets
// the one its data plugin implies (classification unless it says otherwise).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "runner/api/Data.h"
#include "runner/api/Kinds.h"
#include "runner/api/Registry.h"

namespace exprun {

// One evaluation batch's sums on the device: the loss summed over the units (float64), the units
// whose target is the top-1 and among the top-5 predictions (int64 [2]), and the units.
struct EvalSums {
  torch::Tensor lossSum, hits;
  std::int64_t units = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  // What throughput counts ("images", "tokens"), and how many of them targets `y` hold.
  virtual std::string unit() const = 0;
  virtual std::int64_t units(const torch::Tensor& y) const = 0;
  // The units one sample of the data holds (an image: 1; a sequence: its tokens).
  virtual std::int64_t unitsPerSample(const DataInfo& info) const { return 1; }
  // The training loss, the mean over the units, of the model's output against the targets y or, when
  // defined, the soft targets (one distribution a unit), smoothed by `labelSmoothing`.
  virtual torch::Tensor loss(const torch::Tensor& out, const torch::Tensor& y, const torch::Tensor& soft,
                             double labelSmoothing) const = 0;
  // Units whose top-1 prediction is `labels` (an int64 0-dim tensor on the output's device).
  virtual torch::Tensor correct(const torch::Tensor& out, const torch::Tensor& labels) const = 0;
  // An evaluation batch's sums (nothing read on the host).
  virtual EvalSums evalSums(const torch::Tensor& out, const torch::Tensor& y) const = 0;
  // `n` samples of the data's shape with random inputs and targets, on the CPU (FLOP counts, memory
  // probes, profiles).
  virtual Batch probe(const DataInfo& info, std::int64_t n) const = 0;
};

}  // namespace exprun
