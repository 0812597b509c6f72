// Purpose: the rows of a run's model comparison (the result file's "compression": the full-width,
// pruned and int8 models a run's methods produce) — a model described by its parameters, counted
// FLOPs, weight bytes and Top-1, and its inference throughput timed at batch 1 and 64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runner/api/Model.h"
#include "runner/results/ResultFile.h"

namespace exprun {

// Bytes of a float model's parameters and buffers.
std::int64_t weightBytes(Model& m);

// A row: `name`, the model's parameters and weight bytes, `flops` (forward, per image), `top1` (-1: none).
CompressedModel describeModel(const std::string& name, Model& m, double flops, double top1);

// Inference images/s of `forward` on random images of `shape` ([C, H, W]) at `batch` on `device`:
// the median of timed repeats (at least 5, about a second in all) after warm-up.
double inferenceImagesPerS(const std::function<torch::Tensor(torch::Tensor)>& forward, const std::vector<std::int64_t>& shape,
                           std::int64_t batch, const torch::Device& device, bool channelsLast);

// Times a float model (fp32, evaluation mode) at batch 1 and 64 into `row`.
void timeFloatModel(CompressedModel& row, Model& m, const std::vector<std::int64_t>& shape, const torch::Device& device,
                    bool channelsLast);

}  // namespace exprun
