// Purpose: the autocast guard (see Autocast.h).
#include "runner/nn/Autocast.h"

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

NoAutocast::NoAutocast(c10::DeviceType device) : device_(device), was_(at::autocast::is_autocast_enabled(device)) {
  at::autocast::set_autocast_enabled(device_, false);
}

NoAutocast::~NoAutocast() { at::autocast::set_autocast_enabled(device_, was_); }

}  // namespace exprun
