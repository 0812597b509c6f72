// Purpose: the fused batch norm -> ReLU -> 2x2 max-pool CPU kernel (plugins/models/BnReluPool.h) against
// libtorch's three modules on the same input, training mode: milliseconds per call, forward alone
// and forward + backward, NCHW and channels_last, at the small_cnn's two stages' shapes. One JSON
// line per case (median of REPEATS rounds of 50 calls after 5 warm-up calls).
// Usage: exprun_bench_kernels [REPEATS=5]   (bench/bench_bn_relu_pool.sh builds and runs it)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "plugins/models/BnReluPool.h"

namespace {

namespace tnn = torch::nn;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Milliseconds per call of `f`: the median of `repeats` rounds of 50 calls, after 5 warm-up calls.
template <class F>
double timeMs(F&& f, int repeats) {
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> rounds;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) f();
    rounds.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / 50);
  }
  return median(rounds);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  for (auto layout : {torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast})
    for (const auto& shape : {std::vector<std::int64_t>{128, 16, 28, 28}, std::vector<std::int64_t>{128, 32, 14, 14}}) {
      torch::manual_seed(5);
      tnn::BatchNorm2d fused(shape[1]), plain(shape[1]);
      {
        torch::NoGradGuard g;
        fused->weight.uniform_(0.5, 1.5);
        plain->weight.copy_(fused->weight);
      }
      auto x = torch::randn({shape[0], shape[1], shape[2], shape[3]}).contiguous(layout).requires_grad_(true);
      auto go = torch::randn({shape[0], shape[1], shape[2] / 2, shape[3] / 2}).contiguous(layout);
      const double fusedFwd = timeMs([&] { torch::NoGradGuard g; exprun::bnReluPool(x, *fused); }, repeats);
      const double plainFwd =
          timeMs([&] { torch::NoGradGuard g; torch::max_pool2d(torch::relu(plain->forward(x)), 2); }, repeats);
      const double fusedBoth = timeMs([&] { exprun::bnReluPool(x, *fused).backward(go); }, repeats);
      const double plainBoth =
          timeMs([&] { torch::max_pool2d(torch::relu(plain->forward(x)), 2).backward(go); }, repeats);
      std::printf("{\"layout\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld], \"threads\": %d, "
                  "\"forward_ms\": {\"fused\": %.4f, \"modules\": %.4f}, "
                  "\"forward_backward_ms\": {\"fused\": %.4f, \"modules\": %.4f}}\n",
                  layout == torch::MemoryFormat::Contiguous ? "nchw" : "channels_last",
                  static_cast<long long>(shape[0]), static_cast<long long>(shape[1]), static_cast<long long>(shape[2]),
                  static_cast<long long>(shape[3]), torch::get_num_threads(), fusedFwd, plainFwd, fusedBoth, plainBoth);
    }
  return 0;
}
