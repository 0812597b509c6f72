// Purpose: mixed precision's backward half — a dynamic loss scaler for fp16 built on ATen's fused
// kernels (_amp_foreach_non_finite_check_and_unscale_, _amp_update_scale_): initial scale 65536, x2
// after 2000 finite steps, x0.5 on overflow; a step with inf/NaN gradients is skipped and counted.
// Order per optimizer step: allreduce -> unscale -> clip -> step if finite -> update the scale.
// Autocast: runner/nn/Autocast.h.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "runner/dist/Dist.h"

namespace exprun {

class GradScaler {
 public:
  GradScaler(bool enabled, const torch::Device& device, double initScale = 65536.0, double growth = 2.0,
             double backoff = 0.5, std::int64_t interval = 2000);
  bool enabled() const { return enabled_; }
  torch::Tensor scale(const torch::Tensor& loss) const { return enabled_ ? loss * scale_ : loss; }
  // Divides the gradients by the scale in place; false when any is inf/NaN (then skip the step).
  // Reads the verdict on the host: on a GPU it waits for the device.
  // `overRanks`: the params are this rank's shards; the verdict is every rank's.
  bool unscale(const std::vector<torch::Tensor>& params, Dist* overRanks = nullptr);
  // The same without reading the verdict: foundInf() holds it (1: skip) for an optimizer that skips
  // on the device (SkipsOnDevice); the skipped steps are counted there too.
  void unscaleOnDevice(const std::vector<torch::Tensor>& params, Dist* overRanks = nullptr);
  const torch::Tensor& foundInf() const { return foundInf_; }
  // Counts the last unscaleOnDevice's verdict among the skipped steps (on the device).
  void countDeviceSkip();
  // Grows or backs off the scale from the last unscale()'s verdict.
  void update();
  double scaleValue() const { return enabled_ ? scale_.item<double>() : 1.0; }
  // Skipped steps so far (reads the device's count: call it at log points and epoch ends).
  std::int64_t skippedSteps() const;
  // Checkpoint state: the scale and growth-tracker tensors (updated in place) and the skip count.
  torch::Tensor& scaleTensor() { return scale_; }
  torch::Tensor& growthTracker() { return growthTracker_; }
  void setSkippedSteps(std::int64_t n);

 private:
  bool enabled_;
  torch::Tensor scale_, growthTracker_, foundInf_;
  torch::Tensor skippedOnDevice_;  // steps unscaleOnDevice found non-finite (float, on the device)
  double growth_, backoff_;
  std::int64_t interval_;
  std::int64_t skipped_ = 0;
};

}  // namespace exprun
