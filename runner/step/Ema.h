// Purpose: exponential moving average of a model's parameters and floating-point buffers (other
// buffers, e.g. BN's step counters, are copied): avg = decay × avg + (1 − decay) × value, every
// train.ema_every optimizer steps; evaluation swaps the averages in and out.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace exprun {

class Ema {
 public:
  Ema(torch::nn::Module& model, double decay);
  void update(torch::nn::Module& model);
  // Exchanges the model's values with the averages (call again to restore).
  void swap(torch::nn::Module& model);
  // The averages, in the order of the model's parameters then buffers (for checkpoints).
  std::vector<torch::Tensor>& averages() { return avg_; }

 private:
  static std::vector<torch::Tensor> state(torch::nn::Module& model);
  double decay_;
  std::vector<torch::Tensor> avg_;
};

}  // namespace exprun
