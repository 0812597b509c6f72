// Purpose: mixed precision's forward half — the autocast dtype of a spec precision, and an RAII
// autocast guard that mirrors Python's torch.autocast (saves and restores the previous state,
// clears the cast cache when the outermost guard exits). The loss scaler: runner/step/GradScaler.h.
#pragma once

#include <torch/torch.h>

#include <optional>

#include "runner/spec/Sections.h"

namespace exprun {

// fp32 -> nullopt, bf16 -> BFloat16, fp16 -> Half.
std::optional<at::ScalarType> autocastDtype(Precision precision);

class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, std::optional<at::ScalarType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool prevEnabled_ = false;
  at::ScalarType prevDtype_ = at::kFloat;
};

// Switches autocast on `device` off (float32 kernels: int8 conversion, fake quantization), and back
// as it was on leaving.
class NoAutocast {
 public:
  explicit NoAutocast(c10::DeviceType device);
  ~NoAutocast();
  NoAutocast(const NoAutocast&) = delete;
  NoAutocast& operator=(const NoAutocast&) = delete;

 private:
  c10::DeviceType device_;
  bool was_;
};

}  // namespace exprun
