// Purpose: autocast guard and loss scaler (see Precision.h).
#include "runner/train/Precision.h"

#include <ATen/autocast_mode.h>

#include <stdexcept>

namespace exprun {

std::optional<at::ScalarType> autocastDtype(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return std::nullopt;
    case Precision::Bf16: return at::kBFloat16;
    case Precision::Fp16: return at::kHalf;
  }
  throw std::logic_error("autocastDtype: unknown precision");
}

AutocastGuard::AutocastGuard(c10::DeviceType device, std::optional<at::ScalarType> dtype) : device_(device) {
  if (!dtype) return;
  active_ = true;
  prevEnabled_ = at::autocast::is_autocast_enabled(device_);
  prevDtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, *dtype);
  at::autocast::increment_nesting();
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, prevEnabled_);
  at::autocast::set_autocast_dtype(device_, prevDtype_);
}

GradScaler::GradScaler(bool enabled, const torch::Device& device, double initScale, double growth, double backoff,
                       std::int64_t interval)
    : enabled_(enabled), growth_(growth), backoff_(backoff), interval_(interval) {
  auto f = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  scale_ = torch::full({1}, initScale, f);
  growthTracker_ = torch::zeros({1}, f.dtype(torch::kInt32));
  foundInf_ = torch::zeros({1}, f);
}

bool GradScaler::unscale(const std::vector<torch::Tensor>& params) {
  if (!enabled_) return true;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  foundInf_.zero_();
  torch::Tensor inv = scale_.reciprocal();
  at::_amp_foreach_non_finite_check_and_unscale_(grads, foundInf_, inv);
  const bool finite = foundInf_.item<float>() == 0.0f;
  if (!finite) ++skipped_;
  return finite;
}

void GradScaler::update() {
  if (!enabled_) return;
  at::_amp_update_scale_(scale_, growthTracker_, foundInf_, growth_, backoff_, interval_);
}

}  // namespace exprun
