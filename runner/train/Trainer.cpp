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
#include "runner/dist/CommStrategy.h"
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

struct EvalResult {
  double loss = 0, top1 = 0, top5 = 0;
};

EvalResult evaluate(Model& model, const Dataset& data, const torch::Device& device, const LoaderOptions& lo, Dist& dist) {
  torch::NoGradGuard noGrad;
  model.eval();
  BatchLoader loader(data, Split::Test, lo);
  double lossSum = 0, c1 = 0, c5 = 0, n = 0;
  while (auto batch = loader.next()) {
    torch::Tensor x = batch->x.to(device, /*non_blocking=*/true), y = batch->y.to(device, true);
    torch::Tensor out = model.forward(x);
    lossSum += torch::nn::functional::cross_entropy(
                   out, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                   .item<double>();
    auto hits = topkCorrect(out, y, {1, 5});
    c1 += static_cast<double>(hits[0]);
    c5 += static_cast<double>(hits[1]);
    n += static_cast<double>(y.size(0));
  }
  model.train();
  auto tot = dist.sum({lossSum, c1, c5, n});  // each rank evaluated its shard of the test set
  if (tot[3] == 0) return {};
  return EvalResult{tot[0] / tot[3], 100.0 * tot[1] / tot[3], 100.0 * tot[2] / tot[3]};
}

void saveWeights(Model& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  for (const auto& p : model.named_parameters()) archive.write(p.key(), p.value().detach().cpu());
  for (const auto& b : model.named_buffers()) archive.write(b.key(), b.value().detach().cpu(), /*is_buffer=*/true);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  archive.save_to(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "'");
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

std::string chooseBackend(const Spec& spec) {
  const std::string& b = spec.distributed.getString("backend");
  if (b != "auto") return b;
  const std::string& dev = spec.train.getString("device");
  return (dev == "cuda" || (dev == "auto" && compat::cudaAvailable())) ? "nccl" : "gloo";
}

torch::Device chooseDevice(const Spec& spec, const DistEnv& env) {
  const std::string& want = spec.train.getString("device");
  if (want == "cuda" && !compat::cudaAvailable())
    throw std::invalid_argument("train.device: 'cuda' requested but no CUDA device is available");
  if (want == "cuda" || (want == "auto" && compat::cudaAvailable()))
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.localRank));
  return torch::Device(torch::kCPU);
}

TrainOutcome Trainer::run(const std::string& resultPath) {
  Dist single;
  Dist& dist = dist_ ? *dist_ : single;
  const int rank = dist.rank(), worldSize = dist.worldSize();
  const Options& t = spec_.train;
  // Threads: all cores of the host, shared by the ranks on it, unless train.threads says.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = t.getInt("threads") > 0 ? static_cast<int>(t.getInt("threads"))
                                              : std::max(1, cores / std::max(1, dist.env().localWorldSize));
  compat::setThreads(threads);
  const torch::Device device = chooseDevice(spec_, dist.env());
  dist.setDevice(device);
  torch::manual_seed(static_cast<std::uint64_t>(spec_.seed));

  // Plugins: data, model, optimizer, schedule.
  auto data = dataRegistry().get(spec_.data.type())(spec_.data);
  data->load();
  auto model = modelRegistry().get(spec_.model.type())(spec_.model, data->info());
  model->to(device);
  dist.broadcastModel(*model);  // every rank starts from rank 0's weights
  auto comm = commRegistry().get(dist.active() ? spec_.comm.type() : std::string("none"))(spec_.comm);
  comm->attach(*model, dist);
  const std::int64_t batchSize = t.getInt("batch_size");
  const int accumulate = 1;
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
  trainLo.rank = rank;
  trainLo.worldSize = worldSize;
  LoaderOptions evalLo = trainLo;
  evalLo.shuffle = false;
  evalLo.padToEqual = false;
  evalLo.batchSize = t.getInt("eval_batch_size");

  const std::int64_t epochs = t.getInt("epochs");
  LoaderOptions probe = trainLo;
  probe.workers = 0;
  const std::int64_t stepsPerEpoch = BatchLoader(*data, Split::Train, probe).numBatches();
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
                     {"derived", "test_samples", std::to_string(data->size(Split::Test))},
                     {"derived", "world_size", std::to_string(worldSize)},
                     {"derived", "backend", dist.backendName()},
                     {"derived", "comm", dist.active() ? spec_.comm.type() : std::string("none")},
                     {"derived", "launcher", dist.env().launcher}});

  nlohmann::json provenance = collectProvenance(device, threads, worldSize);
  provenance["parameters"] = countParameters(*model);
  provenance["global_batch"] = globalBatch;
  provenance["backend"] = dist.backendName();
  provenance["comm"] = dist.active() ? spec_.comm.type() : "none";
  provenance["launcher"] = dist.env().launcher;
  ResultFile result(spec_.name, spec_.toJson(), provenance);
  auto save = [&] {
    if (rank == 0 && !resultPath.empty()) result.write(resultPath);
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
    double lossSum = 0, commWait = 0;
    std::int64_t correct = 0, samples = 0, epochSteps = 0;
    double currentLr = lr;
    while (step < totalSteps) {
      // A stop request on any rank stops every rank at the same step.
      const bool stop = dist.active() ? dist.max({stopRequested().load() ? 1.0 : 0.0})[0] > 0 : stopRequested().load();
      if (stop) {
        interrupted = true;
        break;
      }
      auto batch = loader.next();
      if (!batch) break;
      torch::Tensor x = batch->x.to(device, true), y = batch->y.to(device, true);
      currentLr = schedule->lr(step);
      compat::setLearningRate(*optimizer, currentLr);
      if (comm->keepsGradStorage())
        compat::zeroGradKeepStorage(*optimizer);  // gradients are views into the comm buckets
      else
        optimizer->zero_grad();
      torch::Tensor out = model->forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(out, y);
      loss.backward();
      commWait += comm->finish();
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
    // Epoch figures as a multi-GPU table shows them: time and waits are the slowest rank's,
    // samples and losses add up over ranks.
    const double myTime = clock.seconds();
    auto maxes = dist.max({myTime, loader.waitSeconds(), commWait});
    auto sums = dist.sum({lossSum, static_cast<double>(correct), static_cast<double>(samples)});
    EpochRecord rec;
    rec.epoch = epoch;
    rec.timeS = maxes[0];
    rec.dataWaitS = maxes[1];
    rec.commWaitS = maxes[2];
    rec.steps = epochSteps;
    rec.samples = static_cast<std::int64_t>(sums[2]);
    rec.imagesPerS = sums[2] / std::max(rec.timeS, 1e-9);
    rec.trainLoss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    rec.trainTop1 = sums[2] > 0 ? 100.0 * sums[1] / sums[2] : 0.0;
    rec.lr = currentLr;
    if (t.getBool("eval")) {
      EvalResult ev = evaluate(*model, *data, device, evalLo, dist);
      rec.valLoss = ev.loss;
      rec.valTop1 = ev.top1;
      rec.valTop5 = ev.top5;
    }
    auto perRank = dist.gather(static_cast<double>(peakMemoryBytes(device)));
    for (double m : perRank) rec.peakMemoryPerRank.push_back(static_cast<std::int64_t>(m));
    rec.peakMemoryBytes = *std::max_element(rec.peakMemoryPerRank.begin(), rec.peakMemoryPerRank.end());
    result.addEpoch(rec);
    save();
    log::info(strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | val loss %.4f top1 %.2f%% top5 %.2f%% | "
                   "%.0f img/s, data wait %.2f s, comm wait %.2f s, peak memory %.1f MiB",
                   static_cast<long long>(epoch), formatDuration(rec.timeS).c_str(), rec.trainLoss, rec.trainTop1,
                   rec.valLoss, rec.valTop1, rec.valTop5, rec.imagesPerS, rec.dataWaitS,
                   rec.commWaitS, rec.peakMemoryBytes / 1048576.0));
  }
  result.setStatus(interrupted ? "interrupted" : "completed");
  save();
  if (rank == 0 && !resultPath.empty() && spec_.output.getBool("save_weights"))
    saveWeights(*model, resultPath.substr(0, resultPath.size() - 5) + ".weights.pt");
  dist.barrier();
  return TrainOutcome{result.toJson(), interrupted, model};
}

}  // namespace exprun
