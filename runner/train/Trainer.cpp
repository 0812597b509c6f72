// Purpose: single-process trainer (see Trainer.h).
#include "runner/train/Trainer.h"

#include <unistd.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runner/Compat.h"
#include "runner/Log.h"
#include "runner/Version.h"
#include "runner/data/BatchLoader.h"
#include "runner/dist/GradReducer.h"
#include "runner/metrics/Meters.h"
#include "runner/results/ResultFile.h"
#include "runner/train/Planner.h"
#include "runner/train/Precision.h"
#include "runner/train/Resume.h"
#include "runner/train/Schedule.h"

namespace exprun {

std::atomic<bool>& stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

std::shared_ptr<Model> buildModel(const Spec& spec) {
  auto data = build<DataKind>(spec.data);
  return build<ModelKind>(spec.model, data->info());
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

// L2 norm of all gradients together (what clip_grad_norm_ compares with its bound).
double gradNorm(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> norms;
  for (const auto& p : params)
    if (p.grad().defined()) norms.push_back(p.grad().detach().to(torch::kFloat32).norm());
  return norms.empty() ? 0.0 : torch::stack(norms).norm().item<double>();
}

void checkPrecisionSupported(Precision precision, const torch::Device& device) {
  auto dtype = autocastDtype(precision);
  if (!dtype) return;
  try {
    torch::NoGradGuard g;
    AutocastGuard ac(device.type(), dtype);
    auto w = torch::randn({2, 1, 3, 3}, torch::TensorOptions().device(device));
    auto y = torch::conv2d(torch::randn({1, 1, 4, 4}, torch::TensorOptions().device(device)), w);
    (void)y;
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("train.precision: ") + precisionName(precision) +
                                " autocast is not supported on " + device.str() +
                                " by this LibTorch (" + std::string(e.what()).substr(0, 120) + ")");
  }
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

torch::Tensor classificationLoss(const torch::Tensor& logits, const torch::Tensor& targets, double labelSmoothing) {
  return torch::nn::functional::cross_entropy(
      logits.to(torch::kFloat32), targets,
      torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(labelSmoothing));
}

StepOutcome optimizerStep(torch::optim::Optimizer& optimizer, GradScaler& scaler, const std::vector<torch::Tensor>& params,
                          double clipNorm, double clipValue, std::optional<double> knownNorm) {
  StepOutcome r;
  r.stepped = scaler.unscale(params);
  if (r.stepped) {
    r.gradNorm = clipNorm > 0 ? torch::nn::utils::clip_grad_norm_(params, clipNorm)
                              : knownNorm ? *knownNorm : gradNorm(params);
    if (clipValue > 0) torch::nn::utils::clip_grad_value_(params, clipValue);
    optimizer.step();
  }
  scaler.update();
  return r;
}

std::string chooseBackend(const Spec& spec) {
  const std::string& b = spec.distributed.backend;
  if (b != "auto") return b;
  const DeviceChoice dev = spec.train.device;
  return (dev == DeviceChoice::Cuda || (dev == DeviceChoice::Auto && compat::cudaAvailable())) ? "nccl" : "gloo";
}

torch::Device chooseDevice(const Spec& spec, const DistEnv& env) {
  const DeviceChoice want = spec.train.device;
  if (want == DeviceChoice::Cuda && !compat::cudaAvailable())
    throw std::invalid_argument("train.device: 'cuda' requested but no CUDA device is available");
  if (want == DeviceChoice::Cuda || (want == DeviceChoice::Auto && compat::cudaAvailable()))
    // One GPU per local rank; more ranks than GPUs share them round-robin (e.g. Gloo tests on one GPU).
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(env.localRank % std::max(1, compat::cudaDeviceCount())));
  return torch::Device(torch::kCPU);
}

TrainOutcome Trainer::run(const std::string& resultPath) {
  Dist single;
  Dist& dist = dist_ ? *dist_ : single;
  const int rank = dist.rank(), worldSize = dist.worldSize();
  const TrainConfig& t = spec_.train;
  // Threads: all cores of the host, shared by the ranks on it, unless train.threads says.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = t.threads > 0 ? static_cast<int>(t.threads)
                                              : std::max(1, cores / std::max(1, dist.env().localWorldSize));
  compat::setThreads(threads);
  const torch::Device device = chooseDevice(spec_, dist.env());
  dist.setDevice(device);
  std::optional<MemoryPlan> memoryPlan;
  if (!t.batchSize) {  // batch_size: auto
    if (t.memoryBudget.empty() || t.globalBatch == 0)
      throw std::invalid_argument("train.batch_size: auto needs train.memory_budget (e.g. 20GiB) and train.global_batch");
    std::int64_t budget;
    try {
      budget = parseBytes(t.memoryBudget);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("train.memory_budget: ") + e.what());
    }
    memoryPlan = planMemory(spec_, budget, t.globalBatch, dist, device);
    log::info(memoryPlan->table());
    spec_ = applyPlan(spec_, *memoryPlan);
  }
  torch::manual_seed(static_cast<std::uint64_t>(spec_.seed));

  // Plugins: data, model, optimizer, schedule.
  auto data = build<DataKind>(spec_.data);
  data->load();
  auto model = build<ModelKind>(spec_.model, data->info());
  model->to(device);
  {  // activation checkpointing: named stages, or all of them
    const auto& wanted = t.activationCheckpointing;
    const auto valid = model->stages();
    std::vector<std::string> chosen;
    for (const auto& w : wanted) {
      if (w == "all") {
        chosen = valid;
        continue;
      }
      if (w == "none") continue;
      if (std::find(valid.begin(), valid.end(), w) == valid.end()) {
        std::string list;
        for (const auto& v : valid) list += (list.empty() ? "" : ", ") + v;
        throw std::invalid_argument("train.activation_checkpointing: model '" + spec_.model.type() + "' has no stage '" + w +
                                    "'; valid: " + (list.empty() ? std::string("(none)") : list) + ", all, none");
      }
      if (std::find(chosen.begin(), chosen.end(), w) == chosen.end()) chosen.push_back(w);
    }
    model->setCheckpointed(chosen);
  }
  const bool channelsLast = t.channelsLast;
  if (channelsLast) {
    torch::NoGradGuard g;
    for (auto& p : model->parameters())
      if (p.dim() == 4) p.set_data(p.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
  dist.broadcastModel(*model);  // every rank starts from rank 0's weights
  const std::string commName = dist.active() ? spec_.distributed.comm.type() : std::string("none");
  GradReducer comm(build<CommKind>(spec_.distributed.comm), dist);  // reduces nothing for a single process
  comm.attach(*model);
  const std::int64_t batchSize = *t.batchSize;
  const std::int64_t accumulate = t.accumulate;
  const Precision precision = t.precision;
  checkPrecisionSupported(precision, device);
  const auto amp = autocastDtype(precision);
  GradScaler scaler(precision == Precision::Fp16, device);
  const double labelSmoothing = t.labelSmoothing;
  const double clipNorm = t.clipGradNorm, clipValue = t.clipGradValue;
  const double emaDecay = t.emaDecay;
  const std::int64_t emaEvery = t.emaEvery;
  std::unique_ptr<Ema> ema = emaDecay > 0 ? std::make_unique<Ema>(*model, emaDecay) : nullptr;
  std::vector<torch::Tensor> params;
  for (auto& p : model->parameters())
    if (p.requires_grad()) params.push_back(p);
  const std::int64_t globalBatch = batchSize * worldSize * accumulate;
  const LrSettings lrSettings = lrOptions().read(spec_.optimizer);
  const double lr = scaleLearningRate(lrSettings.lr, lrSettings.baseBatch, globalBatch, lrSettings.scaleLr);
  auto optimizer = build<OptimizerKind>(spec_.optimizer, *model, lr);

  LoaderOptions trainLo;
  trainLo.batchSize = batchSize;
  trainLo.shuffle = true;
  trainLo.seed = static_cast<std::uint64_t>(spec_.seed);
  trainLo.workers = static_cast<int>(t.workers);
  trainLo.prefetch = static_cast<int>(t.prefetch);
  trainLo.rank = rank;
  trainLo.worldSize = worldSize;
  trainLo.pinMemory = device.is_cuda();  // host-to-device copies below are non_blocking
  LoaderOptions evalLo = trainLo;
  evalLo.shuffle = false;
  evalLo.padToEqual = false;
  evalLo.batchSize = t.evalBatchSize;

  const std::int64_t epochs = t.epochs;
  LoaderOptions probe = trainLo;
  probe.workers = 0;
  const std::int64_t microPerEpoch = BatchLoader(*data, Split::Train, probe).numBatches();
  if (microPerEpoch == 0) throw DataError("data: the training split is empty");
  // An optimizer step takes `accumulate` micro-batches; the epoch's last step may take fewer.
  const std::int64_t stepsPerEpoch = (microPerEpoch + accumulate - 1) / accumulate;
  std::int64_t totalSteps = epochs * stepsPerEpoch;
  if (t.maxSteps > 0) totalSteps = std::min(totalSteps, t.maxSteps);
  auto schedule = build<SchedulerKind>(spec_.scheduler,
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
                     {"derived", "comm", commName},
                     {"derived", "launcher", dist.env().launcher},
                     {"derived", "micro_batch", std::to_string(batchSize)},
                     {"derived", "accumulate", std::to_string(accumulate)}});

  nlohmann::json provenance = collectProvenance(device, threads, worldSize);
  provenance["parameters"] = countParameters(*model);
  provenance["global_batch"] = globalBatch;
  provenance["backend"] = dist.backendName();
  provenance["comm"] = commName;
  provenance["launcher"] = dist.env().launcher;
  provenance["precision"] = precisionName(precision);
  provenance["micro_batch"] = batchSize;
  provenance["accumulate"] = accumulate;
  provenance["channels_last"] = channelsLast;
  provenance["ema_decay"] = emaDecay;
  provenance["checkpointed_stages"] = model->checkpointed();
  if (memoryPlan) provenance["memory_plan"] = memoryPlan->toJson();
  ResultFile result(spec_.name, spec_.toJson(), provenance);
  auto save = [&] {
    if (rank == 0 && !resultPath.empty()) result.write(resultPath);
  };

  // Checkpoints: every N steps and/or every N epochs, and when a stop is requested.
  const CheckpointConfig& ck = spec_.output.checkpoint;
  const std::int64_t ckEverySteps = ck.everySteps, ckEveryEpochs = ck.everyEpochs;
  const bool checkpointing = ckEverySteps > 0 || ckEveryEpochs > 0;
  const std::string outDir = resultPath.empty() ? spec_.output.dir
                                                : std::filesystem::path(resultPath).parent_path().string();
  CheckpointStore store(checkpointRoot(spec_, outDir.empty() ? "." : outDir));
  TrainParts parts{*model, *optimizer, scaler, ema.get()};
  TrainProgress prog;  // position and this rank's meters of the epoch in progress
  if (!resume_.what.empty()) {
    auto restored = restoreCheckpoint(resume_.what, store, dist, spec_, parts, resume_.force, device);
    if (restored) {
      prog = restored->progress;
      scaler.setSkippedSteps(prog.scalerSkipped);
      for (const auto& e : restored->resultEpochs) result.addEpoch(epochFromJson(e));
      log::info(strf("resumed from %s: epoch %lld, step %lld (%lld micro-batches into the epoch)", restored->path.c_str(),
                     static_cast<long long>(prog.epoch), static_cast<long long>(prog.step),
                     static_cast<long long>(prog.micro)));
    } else {
      log::info("no checkpoint in " + store.dir() + " yet: starting from the beginning");
    }
    disarmFaults();  // a retry must get through
  }
  auto checkpoint = [&](const TrainProgress& at) {
    Stopwatch saving;
    const std::string where = saveCheckpoint(store, static_cast<int>(ck.keep), dist, spec_, data->info(), parts,
                                             at, result.toJson()["epochs"], device);
    std::uintmax_t bytes = 0;
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(where, ec)) bytes += f.file_size(ec);
    log::info(strf("checkpoint saved: %s (step %lld, %.1f MiB, %.2f s)", where.c_str(), static_cast<long long>(at.step),
                   bytes / 1048576.0, saving.seconds()));
  };
  const bool skipNonFinite = t.onNonFinite == NonFinitePolicy::Skip;

  const std::int64_t logEvery = t.logEvery;
  std::int64_t step = prog.step;
  const std::int64_t firstStep = step;
  bool interrupted = false;
  Stopwatch runClock;
  std::int64_t skippedBefore = data->skippedSamples() - prog.skippedImages;
  model->train();
  for (std::int64_t epoch = prog.epoch; epoch <= epochs; ++epoch) {
    // Done when the steps are; but an epoch resumed after its last step still needs its end
    // (evaluation, record) when the checkpoint was taken before that.
    if (step >= totalSteps && !(epoch == prog.epoch && prog.micro > 0)) break;
    trainLo.epoch = epoch;
    trainLo.startBatch = prog.micro;
    resetPeakMemory(device);
    BatchLoader loader(*data, Split::Train, trainLo);
    Stopwatch clock;
    std::int64_t micro = prog.micro;
    double currentLr = step > 0 ? schedule->lr(step - 1) : lr;  // the last step's (resuming at an epoch's end)
    // This rank's state of the epoch so far, for a checkpoint taken now.
    auto progressNow = [&] {
      TrainProgress p = prog;
      p.step = step;
      p.epoch = epoch;
      p.micro = micro;
      p.elapsed = prog.elapsed + clock.seconds();
      p.dataWait = prog.dataWait + loader.waitSeconds();
      p.skippedImages = data->skippedSamples() - skippedBefore;
      p.scalerSkipped = scaler.skippedSteps();
      return p;
    };
    while (step < totalSteps) {
      // A stop request on any rank stops every rank at the same step.
      const bool stop = dist.active() ? dist.max({stopRequested().load() ? 1.0 : 0.0})[0] > 0 : stopRequested().load();
      if (stop) {
        interrupted = true;
        break;
      }
      const std::int64_t group = std::min(accumulate, loader.numBatches() - micro);
      if (group <= 0) break;
      currentLr = schedule->lr(step);
      compat::setLearningRate(*optimizer, currentLr);
      if (comm.gradsAreViews())
        compat::zeroGradKeepStorage(*optimizer);  // gradients are views into the comm buckets
      else
        optimizer->zero_grad();
      // Micro-batches: gradients accumulate locally; only the last one is reduced (no_sync).
      double stepLoss = 0;
      for (std::int64_t g = 0; g < group; ++g) {
        auto batch = loader.next();
        if (!batch) throw std::logic_error("batch loader ended early");
        torch::Tensor x = batch->x.to(device, true), y = batch->y.to(device, true);
        if (channelsLast) x = x.contiguous(at::MemoryFormat::ChannelsLast);
        comm.setSync(g == group - 1);
        torch::Tensor out;
        {
          AutocastGuard autocast(device.type(), amp);
          out = model->forward(x);
        }
        torch::Tensor loss = classificationLoss(out, y, labelSmoothing);
        scaler.scale(loss / static_cast<double>(group)).backward();
        const std::int64_t n = y.size(0);
        const double l = loss.item<double>();
        stepLoss += l;
        prog.lossSum += l * n;
        prog.correct += out.argmax(1).eq(y).sum().item<std::int64_t>();
        prog.samples += n;
        ++micro;
      }
      prog.commWait += comm.finish();
      // fp32: a non-finite loss or gradient aborts the run (naming the first tensor) or skips the step.
      bool finite = true;
      std::optional<double> norm;  // computed once here (fp32) and reused by the step
      if (!scaler.enabled()) {
        norm = gradNorm(params);
        finite = std::isfinite(*norm) && std::isfinite(stepLoss);
        if (!dist.active() ? !finite : dist.max({finite ? 0.0 : 1.0})[0] > 0) {
          if (!skipNonFinite) {
            std::string first = "(on another rank)";
            for (const auto& p : model->named_parameters())
              if (p.value().grad().defined() && !torch::isfinite(p.value().grad()).all().item<bool>()) {
                first = "gradient of '" + p.key() + "'";
                break;
              }
            throw NonFiniteError(strf("train.on_nonfinite: abort: non-finite values at step %lld (epoch %lld): loss %g, first "
                                      "non-finite tensor: %s; nothing was applied (set train.on_nonfinite: skip to skip "
                                      "such steps)",
                                      static_cast<long long>(step + 1), static_cast<long long>(epoch), stepLoss, first.c_str()));
          }
          finite = false;
        } else {
          finite = true;
        }
      }
      if (finite) {
        // allreduce -> unscale -> clip -> step if finite -> update the loss scale.
        prog.normSum += optimizerStep(*optimizer, scaler, params, clipNorm, clipValue, norm).gradNorm;
      } else {
        ++prog.nonFiniteSkipped;
        log::warn(strf("step %lld: non-finite loss or gradients, step skipped (train.on_nonfinite: skip)",
                       static_cast<long long>(step + 1)));
      }
      ++step;
      ++prog.epochSteps;
      if (ema && step % emaEvery == 0) ema->update(*model);
      if (logEvery > 0 && (prog.epochSteps % logEvery == 0 || micro == loader.numBatches())) {
        const double el = prog.elapsed + clock.seconds();
        const double ips = prog.samples / std::max(el, 1e-9);
        const double runEl = runClock.seconds();
        const double eta = runEl / std::max<std::int64_t>(1, step - firstStep) * (totalSteps - step);
        log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f img/s  ETA %s",
                       static_cast<long long>(epoch), static_cast<long long>(epochs), static_cast<long long>(prog.epochSteps),
                       static_cast<long long>(stepsPerEpoch), prog.lossSum / std::max<std::int64_t>(1, prog.samples),
                       currentLr, ips, formatDuration(eta).c_str()));
      }
      if (ckEverySteps > 0 && step % ckEverySteps == 0) checkpoint(progressNow());
      faultPoint("step", step, rank);
    }
    if (interrupted) {
      if (checkpointing) checkpoint(progressNow());
      break;
    }
    // Epoch figures as a multi-GPU table shows them: time and waits are the slowest rank's,
    // samples and losses add up over ranks.
    const double myTime = prog.elapsed + clock.seconds();
    auto maxes = dist.max({myTime, prog.dataWait + loader.waitSeconds(), prog.commWait});
    auto sums = dist.sum({prog.lossSum, static_cast<double>(prog.correct), static_cast<double>(prog.samples)});
    EpochRecord rec;
    rec.epoch = epoch;
    rec.timeS = maxes[0];
    rec.dataWaitS = maxes[1];
    rec.commWaitS = maxes[2];
    rec.steps = prog.epochSteps;
    rec.samples = static_cast<std::int64_t>(sums[2]);
    rec.imagesPerS = sums[2] / std::max(rec.timeS, 1e-9);
    rec.trainLoss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
    rec.trainTop1 = sums[2] > 0 ? 100.0 * sums[1] / sums[2] : 0.0;
    rec.lr = currentLr;
    rec.gradNorm = prog.epochSteps > 0 ? prog.normSum / static_cast<double>(prog.epochSteps) : 0.0;
    rec.lossScale = scaler.scaleValue();
    rec.skippedSteps = scaler.skippedSteps() + prog.nonFiniteSkipped;
    if (t.eval) {
      {
        AutocastGuard autocast(device.type(), amp);
        EvalResult ev = evaluate(*model, *data, device, evalLo, dist);
        rec.valLoss = ev.loss;
        rec.valTop1 = ev.top1;
        rec.valTop5 = ev.top5;
        if (ema) {
          ema->swap(*model);
          rec.valTop1Ema = evaluate(*model, *data, device, evalLo, dist).top1;
          ema->swap(*model);
        }
      }
    }
    // Bad images a data plugin skipped this epoch (training and evaluation), over all ranks.
    const std::int64_t skippedNow = data->skippedSamples();
    rec.skippedImages = static_cast<std::int64_t>(dist.sum({static_cast<double>(skippedNow - skippedBefore)})[0]);
    skippedBefore = skippedNow;
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
    // The next epoch starts with fresh meters (the skipped-steps count runs on).
    const std::int64_t nonFinite = prog.nonFiniteSkipped;
    prog = TrainProgress{};
    prog.step = step;
    prog.epoch = epoch + 1;
    prog.nonFiniteSkipped = nonFinite;
    prog.scalerSkipped = scaler.skippedSteps();
    if (ckEveryEpochs > 0 && epoch % ckEveryEpochs == 0) checkpoint(prog);
  }
  result.setStatus(interrupted ? "interrupted" : "completed");
  save();
  if (rank == 0 && !resultPath.empty() && spec_.output.saveWeights)
    saveWeights(*model, resultPath.substr(0, resultPath.size() - 5) + ".weights.pt");
  dist.barrier();
  return TrainOutcome{result.toJson(), interrupted, model};
}

}  // namespace exprun
