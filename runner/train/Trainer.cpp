// Purpose: single-process trainer (see Trainer.h).
#include "runner/train/Trainer.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "runner/Compat.h"
#include "runner/Log.h"
#include "runner/Version.h"
#include "runner/data/BatchLoader.h"
#include "runner/metrics/Meters.h"
#include "runner/results/ResultFile.h"
#include "runner/train/Schedule.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::shared_ptr<Model> buildModel(const Spec& spec) {
  auto data = dataRegistry().get(spec.data.type())(spec.data);
  return modelRegistry().get(spec.model.type())(spec.model, data->info());
}

namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string isoNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string formatDuration(double s) {
  if (s < 60) return strf("%.0f s", s);
  if (s < 3600) return strf("%d min %02d s", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  return strf("%d h %02d min", static_cast<int>(s) / 3600, (static_cast<int>(s) % 3600) / 60);
}

void printTable(const Spec& spec, const std::vector<std::array<std::string, 3>>& extra) {
  auto rows = spec.rows();
  rows.insert(rows.end(), extra.begin(), extra.end());
  size_t w0 = 7, w1 = 3;
  for (const auto& r : rows) w0 = std::max(w0, r[0].size()), w1 = std::max(w1, r[1].size());
  std::string out = "resolved spec:\n";
  out += strf("  %-*s  %-*s  %s\n", static_cast<int>(w0), "section", static_cast<int>(w1), "key", "value");
  for (const auto& r : rows)
    out += strf("  %-*s  %-*s  %s\n", static_cast<int>(w0), r[0].c_str(), static_cast<int>(w1), r[1].c_str(), r[2].c_str());
  out.pop_back();
  log::info(out);
}

torch::Device chooseDevice(const std::string& want) {
  if (want == "cuda" && !compat::cudaAvailable())
    throw std::invalid_argument("train.device: 'cuda' requested but no CUDA device is available");
  if (want == "cuda" || (want == "auto" && compat::cudaAvailable())) return torch::Device(torch::kCUDA, 0);
  return torch::Device(torch::kCPU);
}

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
};

EvalResult evaluate(Model& model, const Dataset& data, const torch::Device& device, const LoaderOptions& lo) {
  torch::NoGradGuard noGrad;
  model.eval();
  BatchLoader loader(data, Split::Test, lo);
  double lossSum = 0;
  std::int64_t c1 = 0, c5 = 0, n = 0;
  while (auto batch = loader.next()) {
    torch::Tensor x = batch->x.to(device, /*non_blocking=*/true), y = batch->y.to(device, true);
    torch::Tensor out = model.forward(x);
    lossSum += torch::nn::functional::cross_entropy(
                   out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
    auto hits = topkCorrect(out, y, {1, 5});
    c1 += hits[0];
    c5 += hits[1];
    n += y.size(0);
  }
  model.train();
  if (n == 0) return {};
  return EvalResult{lossSum / n, 100.0 * c1 / n, 100.0 * c5 / n};
}

}  // namespace

nlohmann::json collectProvenance(const torch::Device& device, int threads, int worldSize) {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  nlohmann::json p{{"exprun_version", EXPRUN_VERSION},
                   {"git_commit", EXPRUN_GIT_COMMIT},
                   {"libtorch_version", compat::torchVersion()},
                   {"compiler", std::string("g++ ") + __VERSION__},
                   {"host", host},
                   {"cpu_model", cpuModel()},
                   {"cores", std::thread::hardware_concurrency()},
                   {"threads", threads},
                   {"device", device.str()},
                   {"world_size", worldSize},
                   {"start_time", isoNow()}};
  return p;
}

TrainOutcome Trainer::run(const std::string& resultPath) {
  const Options& t = spec_.train;
  const int threads = t.getInt("threads") > 0 ? static_cast<int>(t.getInt("threads"))
                                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compat::setThreads(threads);
  const torch::Device device = chooseDevice(t.getString("device"));
  torch::manual_seed(static_cast<std::uint64_t>(spec_.seed));

  // Plugins: data, model, optimizer, schedule.
  auto data = dataRegistry().get(spec_.data.type())(spec_.data);
  data->load();
  auto model = modelRegistry().get(spec_.model.type())(spec_.model, data->info());
  model->to(device);
  const std::int64_t batchSize = t.getInt("batch_size");
  const int worldSize = 1, accumulate = 1;
  const std::int64_t globalBatch = batchSize * worldSize * accumulate;
  const double lr = scaleLearningRate(spec_.optimizer.getFloat("lr"), spec_.optimizer.getInt("base_batch"), globalBatch,
                                      spec_.optimizer.getString("scale_lr"));
  auto optimizer = optimizerRegistry().get(spec_.optimizer.type())(spec_.optimizer, *model, lr);

  LoaderOptions trainLo;
  trainLo.batchSize = batchSize;
  trainLo.shuffle = true;
  trainLo.seed = static_cast<std::uint64_t>(spec_.seed);
  trainLo.workers = static_cast<int>(t.getInt("workers"));
  trainLo.prefetch = static_cast<int>(t.getInt("prefetch"));
  LoaderOptions evalLo = trainLo;
  evalLo.shuffle = false;
  evalLo.batchSize = t.getInt("eval_batch_size");

  const std::int64_t epochs = t.getInt("epochs");
  const std::int64_t stepsPerEpoch = BatchLoader(*data, Split::Train, LoaderOptions{batchSize, true, false, 0, 0, 0, 1}).numBatches();
  if (stepsPerEpoch == 0) throw DataError("data: the training split is empty");
  std::int64_t totalSteps = epochs * stepsPerEpoch;
  if (t.getInt("max_steps") > 0) totalSteps = std::min(totalSteps, t.getInt("max_steps"));
  auto schedule = schedulerRegistry().get(spec_.scheduler.type())(spec_.scheduler,
                                                                   ScheduleContext{lr, stepsPerEpoch, totalSteps});

  printTable(spec_, {{"derived", "parameters", std::to_string(countParameters(*model))},
                     {"derived", "global_batch", std::to_string(globalBatch)},
                     {"derived", "scaled_lr", strf("%.6g", lr)},
                     {"derived", "steps_per_epoch", std::to_string(stepsPerEpoch)},
                     {"derived", "total_steps", std::to_string(totalSteps)},
                     {"derived", "device", device.str()},
                     {"derived", "threads", std::to_string(threads)},
                     {"derived", "train_samples", std::to_string(data->size(Split::Train))},
                     {"derived", "test_samples", std::to_string(data->size(Split::Test))}});

  nlohmann::json provenance = collectProvenance(device, threads, worldSize);
  provenance["parameters"] = countParameters(*model);
  provenance["global_batch"] = globalBatch;
  ResultFile result(spec_.name, spec_.toJson(), provenance);
  auto save = [&] {
    if (!resultPath.empty()) result.write(resultPath);
  };

  const std::int64_t logEvery = t.getInt("log_every");
  std::int64_t step = 0;
  bool interrupted = false;
  Stopwatch runClock;
  model->train();
  for (std::int64_t epoch = 1; epoch <= epochs && step < totalSteps; ++epoch) {
    trainLo.epoch = epoch;
    resetPeakMemory(device);
    BatchLoader loader(*data, Split::Train, trainLo);
    Stopwatch clock;
    double lossSum = 0;
    std::int64_t correct = 0, samples = 0, epochSteps = 0;
    double currentLr = lr;
    while (step < totalSteps) {
      if (stopRequested().load()) {
        interrupted = true;
        break;
      }
      auto batch = loader.next();
      if (!batch) break;
      torch::Tensor x = batch->x.to(device, true), y = batch->y.to(device, true);
      currentLr = schedule->lr(step);
      compat::setLearningRate(*optimizer, currentLr);
      optimizer->zero_grad();
      torch::Tensor out = model->forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(out, y);
      loss.backward();
      optimizer->step();
      ++step;
      ++epochSteps;
      const std::int64_t n = y.size(0);
      lossSum += loss.item<double>() * n;
      correct += out.argmax(1).eq(y).sum().item<std::int64_t>();
      samples += n;
      if (logEvery > 0 && (epochSteps % logEvery == 0 || epochSteps == loader.numBatches())) {
        const double el = clock.seconds();
        const double ips = samples / std::max(el, 1e-9);
        const double runEl = runClock.seconds();
        const double eta = runEl / step * (totalSteps - step);
        log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f img/s  ETA %s",
                       static_cast<long long>(epoch), static_cast<long long>(epochs), static_cast<long long>(epochSteps),
                       static_cast<long long>(loader.numBatches()), lossSum / samples, currentLr, ips,
                       formatDuration(eta).c_str()));
      }
    }
    if (interrupted) break;
    EpochRecord rec;
    rec.epoch = epoch;
    rec.timeS = clock.seconds();
    rec.steps = epochSteps;
    rec.samples = samples;
    rec.imagesPerS = samples / std::max(rec.timeS, 1e-9);
    rec.dataWaitS = loader.waitSeconds();
    rec.trainLoss = samples ? lossSum / samples : 0.0;
    rec.trainTop1 = samples ? 100.0 * correct / samples : 0.0;
    rec.lr = currentLr;
    if (t.getBool("eval")) {
      EvalResult ev = evaluate(*model, *data, device, evalLo);
      rec.valLoss = ev.loss;
      rec.valTop1 = ev.top1;
      rec.valTop5 = ev.top5;
    }
    rec.peakMemoryBytes = peakMemoryBytes(device);
    result.addEpoch(rec);
    save();
    log::info(strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | val loss %.4f top1 %.2f%% top5 %.2f%% | "
                   "%.0f img/s, data wait %.2f s, peak memory %.1f MiB",
                   static_cast<long long>(epoch), formatDuration(rec.timeS).c_str(), rec.trainLoss, rec.trainTop1,
                   rec.valLoss, rec.valTop1, rec.valTop5, rec.imagesPerS, rec.dataWaitS,
                   rec.peakMemoryBytes / 1048576.0));
  }
  result.setStatus(interrupted ? "interrupted" : "completed");
  save();
  return TrainOutcome{result.toJson(), interrupted, model};
}

}  // namespace exprun
