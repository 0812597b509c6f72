// Purpose: exprun's input pipeline alone (no model): the spec's data plugin through the batch loader,
// as the trainer drives it, for the training split; prints one JSON line with images/s.
// Usage: exprun_bench_data SPEC WORKERS BATCH EPOCHS [key.path=value ...]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "runner/api/Data.h"
#include "runner/data/BatchLoader.h"
#include "runner/spec/Spec.h"

int main(int argc, char** argv) {
  using namespace exprun;
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s SPEC WORKERS BATCH EPOCHS [key.path=value ...]\n", argv[0]);
    return 2;
  }
  try {
    std::vector<std::string> sets(argv + 5, argv + argc);
    Spec spec = loadSpec(argv[1], sets);
    torch::set_num_threads(1);
    auto data = build<DataKind>(spec.data);
    data->load();
    LoaderOptions lo;
    lo.workers = std::stoi(argv[2]);
    lo.batchSize = std::stoll(argv[3]);
    lo.prefetch = 2 * std::max(1, lo.workers);
    lo.seed = static_cast<std::uint64_t>(spec.seed);
    const int epochs = std::stoi(argv[4]);
    std::int64_t images = 0;
    double checksum = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int e = 1; e <= epochs; ++e) {
      lo.epoch = e;
      BatchLoader loader(*data, Split::Train, lo);
      while (auto b = loader.next()) {
        images += b->x.size(0);
        checksum += b->x[0][0][0][0].item<double>();  // touch every batch
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("{\"images\": %lld, \"seconds\": %.4f, \"images_per_s\": %.2f, \"checksum\": %.4f}\n",
                static_cast<long long>(images), s, images / s, checksum);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "exprun_bench_data: %s\n", e.what());
    return 2;
  }
}
