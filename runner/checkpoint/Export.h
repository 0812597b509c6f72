// Purpose: exporting a checkpoint's weights for other tools: safetensors with the model's
// state-dict names (torchvision's key names for the torchvision-identical models).
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace exprun {

// Writes a checkpoint's model weights (or its EMA weights) as safetensors. `what`: a checkpoint
// folder or a checkpoint root (its newest). Throws CheckpointError.
void exportSafetensors(const std::string& what, const std::string& outPath, bool ema);

// Safetensors file of named tensors (CPU, contiguous copies are made), sorted by name; atomic.
void writeSafetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const nlohmann::json& metadata);

}  // namespace exprun
