// Purpose: exprun's input pipeline alone (no model): the spec's data plugin through the batch loader,
// as the trainer drives it, for the training split; prints one JSON line with images/s.
// Usage: exprun_bench_data SPEC WORKERS BATCH EPOCHS [key.path=value ...]
// Environment: EXPRUN_BENCH_THREADS (intra-op threads, default 1; 0: all cores), EXPRUN_BENCH_PIN=1,
// EXPRUN_BENCH_INPUT=uint8 (8-bit batches, as train.input: uint8 makes them; the checksum is then of pixels),
// EXPRUN_BENCH_DEVICE=cuda (the batches handed out on the device by the trainer's feed: uint8 batches
// from page-locked memory, copied EXPRUN_BENCH_AHEAD (default 2) ahead, normalised and channels_last
// there, with data.decode's work on the device when the spec asks for it; the rate is then of batches
// ready on the device, decode included: the decode-only rate), EXPRUN_BENCH_BUSY_MS=X (the
// main thread busy X ms after each batch, spinning, as a training step's host work keeps a core
// busy: the pipeline under training, without the training). The line also gives the
// loader's times (LoaderTimes: the workers' wall-clock and CPU seconds building batches, pinning).
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <cstdio>
#include <iostream>

#include "runner/api/Data.h"
#include "runner/data/BatchLoader.h"
#include "runner/spec/Spec.h"
#include "runner/step/Feed.h"

int main(int argc, char** argv) {
  using namespace exprun;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s SPEC WORKERS BATCH EPOCHS [key.path=value ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::string> sets(argv + 5, argv + argc);
    Spec spec = loadSpec(argv[1], sets);
    // Intra-op threads as a training run sets them (train.threads; 0: all cores), or 1 (the default
    // here): EXPRUN_BENCH_THREADS.
    const char* threadsEnv = std::getenv("EXPRUN_BENCH_THREADS");
    const int threads = threadsEnv ? std::atoi(threadsEnv) : 1;
    torch::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    auto data = build<DataKind>(spec.data);
    data->load();
    const char* deviceEnv = std::getenv("EXPRUN_BENCH_DEVICE");
    const torch::Device device(deviceEnv && *deviceEnv ? deviceEnv : "cpu");
    if (device.is_cuda()) data->placeOn(device);  // data.decode: gpu/auto takes the device here
    const char* inputEnv = std::getenv("EXPRUN_BENCH_INPUT");
    if ((inputEnv && std::string(inputEnv) == "uint8") || (device.is_cuda() && data->whyNoBytes().empty())) {
      if (const std::string why = data->whyNoBytes(); !why.empty()) throw std::invalid_argument("uint8 batches: " + why);
      data->makeBytes();
    }
    LoaderOptions lo;
    lo.workers = std::stoi(argv[2]);
    lo.batchSize = std::stoll(argv[3]);
    lo.prefetch = 2 * std::max(1, lo.workers);
    lo.seed = static_cast<std::uint64_t>(spec.seed);
    // EXPRUN_BENCH_PIN=1: batches copied into page-locked memory, as a CUDA training run's loader does.
    const char* pinEnv = std::getenv("EXPRUN_BENCH_PIN");
    lo.pinMemory = (pinEnv && std::string(pinEnv) == "1") || device.is_cuda();
    const char* aheadEnv = std::getenv("EXPRUN_BENCH_AHEAD");
    const int ahead = aheadEnv ? std::atoi(aheadEnv) : 2;
    const char* busyEnv = std::getenv("EXPRUN_BENCH_BUSY_MS");
    const double busyS = busyEnv ? std::atof(busyEnv) / 1000.0 : 0.0;
    auto busy = [&] {  // the main thread on a core for busyS, as a launch-bound step's host
      if (busyS <= 0) return;
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(busyS);
      while (std::chrono::steady_clock::now() < until) {
      }
    };
    const int epochs = std::stoi(argv[4]);
    LoaderTimes times;
    std::int64_t images = 0;
    double checksum = 0;
    torch::Tensor touched = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device));
    const auto t0 = std::chrono::steady_clock::now();
    for (int e = 1; e <= epochs; ++e) {
      lo.epoch = e;
      BatchLoader loader(*data, Split::Train, lo);
      if (device.is_cuda()) {
        DeviceFeed feed(loader, device, /*channelsLast=*/true, ahead);
        while (auto b = feed.next()) {
          images += b->x.size(0);
          touched.add_(b->x[0][0][0][0]);  // touch every batch, on the device: no wait per batch
          busy();
        }
      } else {
        while (auto b = loader.next()) {
          images += b->x.size(0);
          checksum += b->x[0][0][0][0].item<double>();  // touch every batch
          busy();
        }
      }
      const LoaderTimes t = loader.times();
      times.batches += t.batches;
      times.buildS += t.buildS;
      times.buildCpuS += t.buildCpuS;
      times.pinS += t.pinS;
    }
    if (device.is_cuda()) checksum = touched.item<double>();  // waits for the device
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"images\": %lld, \"seconds\": %.4f, \"images_per_s\": %.2f, \"checksum\": %.4f, "
                "\"device\": \"%s\", \"host_decoded_images\": %lld, \"busy_ms\": %.1f, \"loader_batches\": %lld, "
                "\"loader_build_s\": %.4f, \"loader_build_cpu_s\": %.4f, \"loader_pin_s\": %.4f}\n",
                static_cast<long long>(images), s, images / s, checksum, device.str().c_str(),
                static_cast<long long>(data->hostDecodedSamples()), busyS * 1000.0,
                static_cast<long long>(times.batches), times.buildS, times.buildCpuS, times.pinS);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exprun_bench_data: %s\n", e.what());
    return 2;
  }
}
