// Purpose: the fp16 loss scaler (see GradScaler.h).
#include "runner/step/GradScaler.h"

#include <cmath>

namespace exprun {

GradScaler::GradScaler(bool enabled, const torch::Device& device, double initScale, double growth, double backoff,
                       std::int64_t interval)
    : enabled_(enabled), growth_(growth), backoff_(backoff), interval_(interval) {
  auto f = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, initScale, f);
  growthTracker_ = torch::zeros({1}, f.dtype(torch::kInt32));
  foundInf_ = torch::zeros({1}, f);
}

void GradScaler::unscaleOnDevice(const std::vector<torch::Tensor>& params, Dist* overRanks) {
  if (!enabled_) return;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  foundInf_.zero_();
  torch::Tensor inv = scale_.reciprocal();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, foundInf_, inv);
  if (overRanks) overRanks->maxInPlace(foundInf_);
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params, Dist* overRanks) {
  if (!enabled_) return true;
  unscaleOnDevice(params, overRanks);
  const bool finite = foundInf_.item<float>() == 0.0f;
  if (!finite) ++skipped_;
  return finite;
}

void GradScaler::countDeviceSkip() {
  if (!skippedOnDevice_.defined()) skippedOnDevice_ = torch::zeros_like(foundInf_);
  skippedOnDevice_.add_(foundInf_);
}

std::int64_t GradScaler::skippedSteps() const {
  return skipped_ + (skippedOnDevice_.defined() ? std::llround(skippedOnDevice_.item<double>()) : 0);
}

void GradScaler::setSkippedSteps(std::int64_t n) {
  skipped_ = n;
  if (skippedOnDevice_.defined()) skippedOnDevice_.zero_();
}

void GradScaler::update() {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growthTracker_, foundInf_, growth_, backoff_, interval_);
}

}  // namespace exprun
