// Purpose: weights for other tools — a checkpoint's exported as safetensors with the model's
// state-dict names (torchvision's key names for the torchvision-identical models), and a run's
// final weights as a LibTorch archive (output.save_weights).
#pragma once

#include "runner/checkpoint/Meta.h"
#include "runner/spec/Spec.h"

#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "runner/api/Model.h"

namespace exprun {

// A checkpoint's model: its spec and metadata, the data's shape it was trained on, the model built
// from the spec holding the saved weights (the EMA's with `ema`), and those weights by name. `what`:
// a checkpoint folder or a checkpoint root (its newest). Throws CheckpointError.
struct CheckpointModel {
  std::string dir;
  CheckpointMeta meta;
  Spec spec;
  DataInfo info;
  std::shared_ptr<Model> model;
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
};
// `beforeLoading` sees the model as the spec builds it (full width), before the saved tensors
// (a pruned model's are narrower) replace its own.
CheckpointModel loadCheckpointModel(const std::string& what, bool ema,
                                    const std::function<void(Model&, const DataInfo&)>& beforeLoading = {});

// Writes a checkpoint's model weights (or its EMA weights) as safetensors. `what`: a checkpoint
// folder or a checkpoint root (its newest). Throws CheckpointError.
void exportSafetensors(const std::string& what, const std::string& outPath, bool ema);

// The model's parameters and buffers as a LibTorch archive (torch::load, torch.jit-free), atomically.
void saveWeights(Model& model, const std::string& path);

// The named tensors of a safetensors file, sorted by name (CPU, copied out of the file).
// Throws CheckpointError naming the file and the tensor for anything malformed.
std::vector<std::pair<std::string, torch::Tensor>> readSafetensors(const std::string& path);

// Copies a safetensors file's tensors into the module's parameters of the same names. `map` gives
// the module's name for a file's name (empty: the tensor is skipped) and may change the tensor
// (a transpose); every parameter must be given, in its shape. `model` names the module in errors.
// Throws CheckpointError naming the file and the tensor.
void loadSafetensorsInto(torch::nn::Module& module, const std::string& path, const std::string& model,
                         const std::function<std::string(const std::string&, torch::Tensor&)>& map);

// Safetensors file of named tensors (CPU, contiguous copies are made), sorted by name; atomic.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const nlohmann::json& metadata);

}  // namespace exprun
