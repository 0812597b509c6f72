// Purpose: FLOP counting from dispatched operators and the cached peak-FLOP/s benchmark (see Flops.h).
#include "runner/metrics/Flops.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "runner/metrics/Hardware.h"
#include "runner/metrics/Meters.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/CacheDir.h"

#ifdef EXPRUN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace exprun {
namespace {

std::atomic<double>& counted() {
  static std::atomic<double> flops{0};
  return flops;
}
std::atomic<bool>& counting() {
  static std::atomic<bool> on{false};
  return on;
}

void add(double flops) {
  double seen = counted().load();
  while (!counted().compare_exchange_weak(seen, seen + flops)) {
  }
}

double product(c10::IntArrayRef v, std::size_t from = 0) {
  double p = 1;
  for (std::size_t i = from; i < v.size(); ++i) p *= static_cast<double>(v[i]);
  return p;
}

// A convolution's multiply-adds: every weight element meets every output position (transposed:
// every input position) of every image.
double convMacs(c10::IntArrayRef input, c10::IntArrayRef weight, c10::IntArrayRef output, bool transposed) {
  const double positions = transposed ? product(input, 2) : product(output, 2);
  return static_cast<double>(input[0]) * positions * product(weight);
}

// Output spatial sizes of a (non-transposed) convolution.
std::vector<std::int64_t> convOutput(c10::IntArrayRef input, c10::IntArrayRef weight, c10::IntArrayRef stride,
                                     c10::IntArrayRef padding, c10::IntArrayRef dilation) {
  std::vector<std::int64_t> out{input[0], weight[0]};
  const std::size_t dims = input.size() - 2;
  auto at = [](c10::IntArrayRef v, std::size_t i) { return v.size() == 1 ? v[0] : v[i]; };
  for (std::size_t i = 0; i < dims; ++i)
    out.push_back((input[i + 2] + 2 * at(padding, i) - at(dilation, i) * (weight[i + 2] - 1) - 1) / at(stride, i) + 1);
  return out;
}

c10::IntArrayRef sizes(const c10::IValue& v) { return v.toTensor().sizes(); }

// FLOPs of one dispatched operator from its inputs (0 for operators that are not counted).
double operatorFlops(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  auto in = fn.inputs();
  if (name == "aten::mm" && in.size() >= 2 && in[0].isTensor() && in[1].isTensor()) {
    auto a = sizes(in[0]), b = sizes(in[1]);
    return 2.0 * a[0] * a[1] * b[1];
  }
  if ((name == "aten::addmm") && in.size() >= 3 && in[1].isTensor() && in[2].isTensor()) {
    auto a = sizes(in[1]), b = sizes(in[2]);
    return 2.0 * a[0] * a[1] * b[1];
  }
  if (name == "aten::bmm" && in.size() >= 2 && in[0].isTensor() && in[1].isTensor()) {
    auto a = sizes(in[0]), b = sizes(in[1]);
    return 2.0 * a[0] * a[1] * a[2] * b[2];
  }
  if (name == "aten::baddbmm" && in.size() >= 3 && in[1].isTensor() && in[2].isTensor()) {
    auto a = sizes(in[1]), b = sizes(in[2]);
    return 2.0 * a[0] * a[1] * a[2] * b[2];
  }
  // A fused scaled_dot_product_attention (q, k, v [B, H, T, D], forward: QKᵀ and the weighted sum
  // of V, 4·B·H·Tq·Tk·D; backward twice that). The math fallback runs bmm, counted above.
  if (name.rfind("aten::_scaled_dot_product_", 0) == 0 && name.find("attention") != std::string_view::npos &&
      name.find("_math") == std::string_view::npos) {
    const bool backward = name.size() > 9 && name.substr(name.size() - 9) == "_backward";
    const std::size_t q = backward ? 1 : 0;  // backward ops take the output gradient first
    if (in.size() > q + 1 && in[q].isTensor() && in[q + 1].isTensor() && sizes(in[q]).size() == 4) {
      auto qs = sizes(in[q]), ks = sizes(in[q + 1]);
      const double forward = 4.0 * qs[0] * qs[1] * qs[2] * ks[2] * qs[3];
      return backward ? 2.0 * forward : forward;
    }
  }
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
  if (name == "aten::convolution" && in.size() >= 9 && in[0].isTensor() && in[1].isTensor()) {
    auto x = sizes(in[0]), w = sizes(in[1]);
    const bool transposed = in[6].toBool();
    if (transposed) return 2.0 * convMacs(x, w, x, true);
    const auto out = convOutput(x, w, in[3].toIntVector(), in[4].toIntVector(), in[5].toIntVector());
    return 2.0 * convMacs(x, w, out, false);
  }
  // convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
  // transposed, output_padding, groups, output_mask): the input gradient and the weight gradient
  // each cost what the forward did.
  if (name == "aten::convolution_backward" && in.size() >= 11 && in[0].isTensor() && in[1].isTensor() &&
      in[2].isTensor()) {
    auto gy = sizes(in[0]), x = sizes(in[1]), w = sizes(in[2]);
    const double forward = 2.0 * convMacs(x, w, gy, in[7].toBool());
    const auto mask = in[10].toBoolList();
    return forward * ((mask.get(0) ? 1 : 0) + (mask.get(1) ? 1 : 0));
  }
  return 0;
}

std::unique_ptr<at::ObserverContext> onOperator(const at::RecordFunction& fn) {
  if (counting().load(std::memory_order_relaxed)) {
    const double f = operatorFlops(fn);
    if (f > 0) add(f);
  }
  return nullptr;
}

void synchronize(const torch::Device& device, const torch::Tensor& t) {
  if (device.is_cuda()) (void)t.sum().item<double>();  // waits for the queued products
}

double loadAverage1() {
  std::ifstream in("/proc/loadavg");
  double load1 = 1e9;  // unknown: not idle
  in >> load1;
  return load1;
}

}  // namespace

std::string deviceName(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
#endif
  const std::string model = thisCpu().model;
  return model.empty() ? "cpu" : model;
}

bool steadyEnoughToCache(double first, double second, double load1, unsigned cpus) {
  const double larger = std::max(first, second);
  return larger > 0 && std::abs(first - second) <= 0.05 * larger && load1 < 0.25 * std::max(1u, cpus) + 0.5;
}

PeakRule peakRule(const torch::Device& device, Precision precision, int threads) {
  return device.is_cuda() ? cudaPeak(deviceName(device), precision) : cpuPeak(thisCpu(), precision, threads);
}

std::vector<std::string> deviceFeatures(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) {
    const auto* p = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
    return cudaFeatures(p->major, p->minor);
  }
#endif
  return cpuFeatures(thisCpu());
}

FlopCounter::FlopCounter() {
  if (counting().exchange(true)) throw std::logic_error("FlopCounter: one counter at a time");
  counted() = 0;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(onOperator).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  counting() = false;
}

double FlopCounter::flops() const { return counted().load(); }

StepFlops countStepFlops(torch::nn::Module& model, const torch::Tensor& x, std::int64_t units,
                         const std::function<torch::Tensor(torch::Tensor)>& forward,
                         const std::function<torch::Tensor(const torch::Tensor&)>& loss) {
  model.train();
  StepFlops f;
  FlopCounter counter;
  torch::Tensor out = forward(x);
  f.forward = counter.flops() / static_cast<double>(units);
  loss(out).backward();
  f.total = counter.flops() / static_cast<double>(units);
  for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  return f;
}

StepFlops countStepFlops(torch::nn::Module& model, std::int64_t channels, std::int64_t height, std::int64_t width,
                         const std::function<torch::Tensor(torch::Tensor)>& forward) {
  const std::int64_t batch = 2;  // batch norm in training mode needs more than one value per channel
  const torch::Tensor y = torch::zeros({batch}, torch::kLong);
  return countStepFlops(model, torch::zeros({batch, channels, height, width}), batch, forward,
                        [&](const torch::Tensor& logits) { return torch::nn::functional::cross_entropy(logits.to(torch::kFloat), y); });
}

double measurePeakFlops(const torch::Device& device, torch::ScalarType dtype, double seconds) {
  torch::NoGradGuard noGrad;
  auto opts = torch::TensorOptions().device(device).dtype(dtype);
  // Square products of side n: from 256, doubled up to CPU 1024 / CUDA 8192 while a product of the
  // doubled side (8x the time) still fits in a round. A dtype without fast kernels here (fp16 on
  // most CPUs: about 1 GFLOP/s) is measured in about a second, not half a minute.
  const std::int64_t largest = device.is_cuda() ? 8192 : 1024;
  torch::Tensor a, b, c;
  std::int64_t n = 256;
  for (;;) {
    a = torch::randn({n, n}, opts.dtype(torch::kFloat)).to(dtype);
    b = torch::randn({n, n}, opts.dtype(torch::kFloat)).to(dtype);
    c = torch::empty({n, n}, opts);
    torch::mm_out(c, a, b);  // warm-up: kernels chosen, pages touched
    synchronize(device, c);
    Stopwatch one;
    torch::mm_out(c, a, b);
    synchronize(device, c);
    if (n >= largest || 8 * one.seconds() > seconds) break;
    n *= 2;
  }
  const double perProduct = 2.0 * n * n * n;
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    Stopwatch clock;
    std::int64_t products = 0;
    do {
      torch::mm_out(c, a, b);
      ++products;
      if (device.is_cuda() && products % 8 != 0) continue;
      synchronize(device, c);
    } while (clock.seconds() < seconds || products < 2);
    synchronize(device, c);
    best = std::max(best, perProduct * products / clock.seconds());
  }
  return best;
}

PeakFlops peakFlops(const torch::Device& device, torch::ScalarType dtype, bool refresh) {
  PeakFlops p;
  p.key = deviceName(device) + " | " + std::string(c10::toString(dtype)) + " GEMM | " +
          std::to_string(device.is_cuda() ? 1 : at::get_num_threads()) + (device.is_cuda() ? " device" : " threads");
  const std::string dir = cacheDir();
  const std::string path = dir.empty() ? "" : dir + "/peak_flops.json";
  nlohmann::json cache = nlohmann::json::object();
  if (!path.empty()) {
    std::ifstream in(path);
    if (in) {
      try {
        in >> cache;
      } catch (const std::exception&) {
        cache = nlohmann::json::object();  // unreadable: measured again and rewritten
      }
      if (!cache.is_object()) cache = nlohmann::json::object();
    }
  }
  if (!refresh) {
    auto it = cache.find(p.key);
    if (it != cache.end() && it->is_number() && it->get<double>() > 0) {
      p.flopsPerS = it->get<double>();
      p.cached = true;
      return p;
    }
  }
  // Two measurements in a row; cached only when they agree within 5 % on an idle machine (a busy
  // one gives a low peak, and every MFU against it a flattering figure).
  const double first = measurePeakFlops(device, dtype), second = measurePeakFlops(device, dtype);
  p.flopsPerS = std::max(first, second);
  p.cacheable = steadyEnoughToCache(first, second, loadAverage1(), std::thread::hardware_concurrency());
  if (!path.empty() && p.cacheable) {
    cache[p.key] = p.flopsPerS;
    try {
      writeFileAtomically(path, cache.dump(2) + "\n");
    } catch (const std::exception&) {
      // a read-only home: the figure is still right, only measured again next time
    }
  }
  return p;
}

}  // namespace exprun
