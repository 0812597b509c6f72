// Purpose: the compression steps of a run (compress: in the spec), as the trainer calls them —
// a structured pruning step before an epoch (the model rebuilt smaller, the optimizer, reducer
// and EMA rebuilt for it, its FLOPs recounted, Top-1 measured right after), and at the run's end
// the comparison of the full-width, pruned and int8 models: parameters, counted FLOPs, bytes,
// Top-1 and inference images/s at batch 1 and 64 (the int8 weights written beside the result file).
#pragma once

#include <string>
#include <vector>

#include "runner/results/ResultFile.h"
#include "runner/train/Setup.h"

namespace exprun {

// Collective: pruning step `step` before epoch `epoch`; `top1Before`: the last evaluation's (-1: none).
PruneRecord pruneBeforeEpoch(TrainSetup& s, Dist& dist, int step, std::int64_t epoch, double top1Before);

// The FLOPs per image of the model at `widths` (MFU's numerator), counted on a throwaway model; the
// run's random sequence is left as it was.
void recountFlops(TrainSetup& s, const Widths& widths);

// compress.qat_epochs: the first epoch that trains with fake quantization (0: none).
std::int64_t qatFirstEpoch(const Spec& spec);

// Quantization-aware fine-tuning from here on: the activation grids calibrated as post-training
// int8 calibrates them (the same batches on every rank: the same grids), then training and
// evaluation run the model's fake-quantized forward (FakeQuantForward). `epoch`: for the log.
void startFakeQuant(TrainSetup& s, Dist& dist, std::int64_t epoch);
// The same on a checkpoint's grids.
void resumeFakeQuant(TrainSetup& s, const std::vector<ActivationGrid>& grids);

// Collective, after training: the models to compare (empty when the spec compresses nothing).
// `resultPath`: the result file (the int8 weights go to <stem>.int8.safetensors beside it; "" for none).
std::vector<CompressedModel> compareModels(TrainSetup& s, Dist& dist, const ResultFile& result,
                                           const std::string& resultPath);

// Inference images/s of `forward` on random images of `shape` ([C, H, W]) at `batch` on `device`:
// the median of timed repeats (at least 5, about a second in all) after warm-up.
double inferenceImagesPerS(const std::function<torch::Tensor(torch::Tensor)>& forward, const std::vector<std::int64_t>& shape,
                           std::int64_t batch, const torch::Device& device, bool channelsLast);

}  // namespace exprun
