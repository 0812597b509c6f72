// Purpose: the rows of a run's model comparison (see Compare.h).
#include "plugins/methods/compress/Compare.h"

#include <algorithm>

#include "runner/metrics/Meters.h"

namespace exprun {

std::int64_t weightBytes(Model& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel() * static_cast<std::int64_t>(p.element_size());
  for (const auto& b : m.buffers()) n += b.numel() * static_cast<std::int64_t>(b.element_size());
  return n;
}

CompressedModel describeModel(const std::string& name, Model& m, double flops, double top1) {
  CompressedModel r;
  r.model = name;
  r.params = countParameters(m);
  r.flopsPerImage = flops;
  r.bytes = weightBytes(m);
  r.top1 = top1;
  return r;
}

double inferenceImagesPerS(const std::function<torch::Tensor(torch::Tensor)>& forward, const std::vector<std::int64_t>& shape,
                           std::int64_t batch, const torch::Device& device, bool channelsLast) {
  torch::NoGradGuard noGrad;
  std::vector<std::int64_t> dims{batch};
  dims.insert(dims.end(), shape.begin(), shape.end());
  torch::Tensor x = torch::randn(dims, torch::TensorOptions().device(device));
  if (channelsLast) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  const auto wait = [&](const torch::Tensor& y) {
    if (device.is_cuda()) (void)y.sum().item<double>();
  };
  for (int i = 0; i < 3; ++i) wait(forward(x));
  std::vector<double> times;
  double total = 0;
  while ((times.size() < 5 || total < 1.0) && times.size() < 500) {
    const Stopwatch watch;
    wait(forward(x));
    const double dt = watch.seconds();
    times.push_back(dt);
    total += dt;
  }
  std::sort(times.begin(), times.end());
  return static_cast<double>(batch) / times[times.size() / 2];
}

void timeFloatModel(CompressedModel& row, Model& m, const std::vector<std::int64_t>& shape, const torch::Device& device,
                    bool channelsLast) {
  const bool wasTraining = m.is_training();
  m.eval();
  const auto f = [&](torch::Tensor x) { return m.forward(x); };
  row.imagesPerSB1 = inferenceImagesPerS(f, shape, 1, device, channelsLast);
  row.imagesPerSB64 = inferenceImagesPerS(f, shape, 64, device, channelsLast);
  if (wasTraining) m.train();
}

}  // namespace exprun
