// Purpose: the exponential moving average of the weights (see Ema.h).
#include "runner/step/Ema.h"

namespace exprun {

std::vector<torch::Tensor> Ema::state(torch::nn::Module& model) {
  std::vector<torch::Tensor> s;
  for (auto& p : model.parameters()) s.push_back(p);
  for (auto& b : model.buffers()) s.push_back(b);
  return s;
}

Ema::Ema(torch::nn::Module& model, double decay) : decay_(decay) {
  torch::NoGradGuard g;
  for (auto& t : state(model)) avg_.push_back(t.detach().clone());
}

void Ema::update(torch::nn::Module& model) {
  torch::NoGradGuard g;
  auto cur = state(model);
  for (size_t i = 0; i < cur.size(); ++i) {
    if (avg_[i].is_floating_point())
      avg_[i].mul_(decay_).add_(cur[i].detach(), 1.0 - decay_);
    else
      avg_[i].copy_(cur[i]);
  }
}

void Ema::swap(torch::nn::Module& model) {
  torch::NoGradGuard g;
  auto cur = state(model);
  for (size_t i = 0; i < cur.size(); ++i) {
    torch::Tensor tmp = cur[i].detach().clone();
    cur[i].copy_(avg_[i]);
    avg_[i].copy_(tmp);
  }
}

}  // namespace exprun
