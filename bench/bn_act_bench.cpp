// Purpose: the fused batch norm (runner/nn/BnAct.h) against libtorch's BatchNorm2d + add + ReLU at
// ResNet-50's 53 batch-norm layers (224², channels_last; each with what follows it in the model:
// ReLU, residual add + ReLU, or nothing), forward + backward, on a GPU: the milliseconds a training
// step spends there either way, side by side in one run. CUDA events around ten forward + backward
// passes per layer (gradients by autograd::grad, nothing accumulated), median of REPEATS rounds.
// Prints one JSON line.
// Usage: exprun_bench_bnact [BATCH=256] [DTYPE=bf16|fp16|fp32] [REPEATS=5]
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "runner/nn/BnAct.h"

#if defined(EXPRUN_WITH_CUDA)
#include <c10/cuda/CUDAStream.h>
#include <ATen/cuda/CUDAEvent.h>
#endif

namespace {

struct Layer {
  std::int64_t channels, size;
  exprun::BnActivation act;
  bool residual;
  int count;  // layers of this shape in ResNet-50
};

// ResNet-50 at 224²: the stem, then per stage bn1/bn2 (ReLU), bn3 (+ identity, ReLU) and the
// downsample's BN; the first block of stages 2-4 has its bn1 at the previous stage's resolution.
const std::vector<Layer> kLayers = {
    {64, 112, exprun::BnActivation::Relu, false, 1},
    {64, 56, exprun::BnActivation::Relu, false, 6},    {256, 56, exprun::BnActivation::Relu, true, 3},
    {256, 56, exprun::BnActivation::None, false, 1},
    {128, 56, exprun::BnActivation::Relu, false, 1},   {128, 28, exprun::BnActivation::Relu, false, 7},
    {512, 28, exprun::BnActivation::Relu, true, 4},    {512, 28, exprun::BnActivation::None, false, 1},
    {256, 28, exprun::BnActivation::Relu, false, 1},   {256, 14, exprun::BnActivation::Relu, false, 11},
    {1024, 14, exprun::BnActivation::Relu, true, 6},   {1024, 14, exprun::BnActivation::None, false, 1},
    {512, 14, exprun::BnActivation::Relu, false, 1},   {512, 7, exprun::BnActivation::Relu, false, 5},
    {2048, 7, exprun::BnActivation::Relu, true, 3},    {2048, 7, exprun::BnActivation::None, false, 1},
};

}  // namespace

int main(int argc, char** argv) {
#if !defined(EXPRUN_WITH_CUDA)
  std::fprintf(stderr, "exprun_bench_bnact: a build without CUDA\n");
  return 2;
#else
  if (!torch::cuda::is_available() || !exprun::bnActKernelsBuilt()) {
    std::fprintf(stderr, "exprun_bench_bnact: needs a CUDA device and a build with exprun's kernels\n");
    return 2;
  }
  const std::int64_t batch = argc > 1 ? std::stoll(argv[1]) : 256;
  const std::string dtypeName = argc > 2 ? argv[2] : "bf16";
  const int repeats = argc > 3 ? std::stoi(argv[3]) : 5;
  const torch::ScalarType dtype = dtypeName == "fp32" ? torch::kFloat : dtypeName == "fp16" ? torch::kHalf : torch::kBFloat16;
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  auto timeLayer = [&](const Layer& l, bool fused) {
    const std::vector<std::int64_t> shape{batch, l.channels, l.size, l.size};
    const torch::Tensor x = torch::randn(shape, opts).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true);
    const torch::Tensor z =
        l.residual ? torch::randn(shape, opts).contiguous(at::MemoryFormat::ChannelsLast).requires_grad_(true) : torch::Tensor();
    const torch::Tensor dy = torch::randn(shape, opts).contiguous(at::MemoryFormat::ChannelsLast);
    torch::nn::BatchNorm2d bn(l.channels);
    bn->to(torch::kCUDA);
    auto once = [&] {
      torch::Tensor y;
      if (fused) {
        y = exprun::fusedBnAct(x, z, *bn, l.act);
      } else {
        y = bn->forward(x);
        if (z.defined()) y += z;
        if (l.act == exprun::BnActivation::Relu) y.relu_();
      }
      std::vector<torch::Tensor> inputs{x, bn->weight, bn->bias};
      if (z.defined()) inputs.push_back(z);
      (void)torch::autograd::grad({y}, inputs, {dy});
    };
    for (int i = 0; i < 3; ++i) once();  // warm-up: allocations, first launches
    const int iters = 10;
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    start.record();
    for (int i = 0; i < iters; ++i) once();
    stop.record();
    stop.synchronize();
    return static_cast<double>(start.elapsed_time(stop)) / iters;
  };
  std::vector<double> fusedMs, atenMs;
  for (int r = 0; r < repeats; ++r) {
    double f = 0, a = 0;
    for (const Layer& l : kLayers) {
      a += l.count * timeLayer(l, false);
      f += l.count * timeLayer(l, true);
    }
    fusedMs.push_back(f);
    atenMs.push_back(a);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  int layers = 0;
  for (const Layer& l : kLayers) layers += l.count;
  std::printf("{\"batch\": %lld, \"dtype\": \"%s\", \"layers\": %d, \"repeats\": %d, \"aten_ms\": %.3f, "
              "\"fused_ms\": %.3f, \"speedup\": %.3f}\n",
              static_cast<long long>(batch), dtypeName.c_str(), layers, repeats, median(atenMs), median(fusedMs),
              median(atenMs) / median(fusedMs));
  return 0;
#endif
}
