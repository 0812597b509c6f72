// Purpose: the training and planning subcommands' library side: run, launch, validate, export,
// plan, project, peak (see Commands.h). What they throw is mapped in one place (Errors.h).
#include "runner/cli/Commands.h"

#include <csignal>
#include <filesystem>
#include <iostream>
#include <limits>

#include "runner/api/Model.h"
#include "runner/checkpoint/Export.h"
#include "runner/data/CharText.h"
#include "runner/cli/Errors.h"
#include "runner/dist/DistEnv.h"
#include "runner/dist/Slurm.h"
#include "runner/metrics/Flops.h"
#include "runner/nn/Autocast.h"
#include "runner/plan/MemoryEstimate.h"
#include "runner/plan/Planner.h"
#include "runner/plan/Projection.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"
#include "runner/spec/Spec.h"
#include "runner/step/Device.h"
#include "runner/step/Learner.h"
#include "runner/train/Trainer.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/CacheDir.h"
#include "runner/util/Compat.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

extern "C" void onStopSignal(int sig) {
  int none = 0;
  stopSignal().compare_exchange_strong(none, sig);  // the first one says why
  stopRequested().store(true);
  if (sig != SIGUSR1) std::signal(sig, SIG_DFL);  // a second SIGINT/SIGTERM ends the process at once
}

// The result file `run` writes: <--out or output.dir>/<name>.json.
std::string resultPathOf(const RunArgs& args, const Spec& spec) { return RunPaths::of(spec, args.outDir).result(); }

// Trains on this rank (the group joined) and reports: the result file, the epoch table, an interruption.
int train(const Spec& spec, const DistEnv& env, const ResumeRequest& resume, const std::string& path) {
  stopRequested().store(false);
  stopSignal().store(0);
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  // Slurm's warning before a time limit (sbatch --signal=USR1@N): save, requeue, resume.
  std::signal(SIGUSR1, onStopSignal);
  std::unique_ptr<Dist> dist = Dist::join(env, chooseBackend(spec), spec.distributed.timeoutS, spec.distributed.interface);
  dist->checkSameSpec(spec.hash());
  Trainer trainer(spec, dist.get());
  trainer.setResume(resume);
  const std::string job = env.launcher == "slurm" ? slurmJobId() : "";
  if (!job.empty()) {
    trainer.setSlurmJob(job);
    trainer.setStopStatus([job](int sig) { return slurmStopStatus(job, sig); });
  }
  const TrainOutcome outcome = trainer.run(path);
  if (env.rank != 0) return outcome.interrupted ? kExitInterrupted : kExitOk;
  log::info("result file: " + path);
  std::cout << epochTable(outcome.result.dump()) << std::flush;
  if (!outcome.interrupted) return kExitOk;
  const std::string saved = outcome.result.contains("epochs") ? std::to_string(outcome.result["epochs"].size()) : "0";
  if (outcome.status == "requeued") {
    // Everything is written: Slurm may end this job now and start it again (SLURM_RESTART_COUNT >
    // 0 resumes from the checkpoint just saved).
    std::string why;
    if (requeueSlurmJob(job, why))
      log::warn("requeued: Slurm job " + job + " will start again and resume from the checkpoint saved at this step");
    else
      log::error("requeue: Slurm did not requeue job " + job + " (" + why +
                 "); resume by hand with --resume auto (the checkpoint is saved)");
    return kExitInterrupted;
  }
  log::warn(outcome.status + ": the result file holds the " + saved + " completed epoch(s)");
  return kExitInterrupted;
}

// The devices' plan of `plan --for cuda`: measured on this machine's CPU.
nlohmann::json planForDevices(const Spec& spec, const PlanArgs& a, std::string& text) {
  DeviceTarget target;
  target.device = a.forDevice;
  target.deviceMemory = parseBytes(a.deviceMemory);
  target.gpus = a.gpus;
  target.globalBatch = a.globalBatch;
  target.probeBatches = a.probeBatches;
  target.allowance.context = parseBytes(a.context);
  target.allowance.workspace = parseBytes(a.workspace);
  target.allowance.fragmentation = a.fragmentation;
  const DevicePlan plan = planForDevice(spec, target);
  text = plan.table();
  return plan.toJson();
}

// The plan of `plan --memory-budget`, probing this machine's device on every rank; empty text on
// the ranks other than 0.
nlohmann::json planHere(const Spec& spec, const PlanArgs& a, std::string& text) {
  if (a.budget.empty()) throw std::invalid_argument("give --memory-budget (plan here) or --for cuda --device-memory");
  const DistEnv env = parseDistEnv();
  log::setRank(env.rank);
  const std::int64_t budget = parseBytes(a.budget);
  auto dist = Dist::join(env, chooseBackend(spec), spec.distributed.timeoutS, spec.distributed.interface);
  const torch::Device device = chooseDevice(spec, env);
  dist->setDevice(device);
  const Batching& b = spec.train.batching;
  std::int64_t globalBatch = a.globalBatch;
  if (globalBatch <= 0) globalBatch = b.globalBatch;
  if (globalBatch <= 0) globalBatch = b.batchSize.value_or(1) * dist->worldSize() * b.accumulate;
  // On CUDA the data plugin's device memory counts (data.decode: gpu's buffers, synthetic's pool).
  std::string notLoaded;
  const std::shared_ptr<Dataset> data = device.is_cuda() ? loadedForPlan(spec, &notLoaded) : nullptr;
  const MemoryPlan plan = planMemory(spec, budget, globalBatch, *dist, device, nullptr, data.get());
  if (env.rank != 0) return nullptr;
  text = plan.table();
  return plan.toJson();
}

}  // namespace

std::string epochTable(const std::string& resultJson) {
  auto j = nlohmann::json::parse(resultJson);
  const bool tokens = !j.at("epochs").empty() && j["epochs"][0].contains("tokens_per_s");  // a language model's
  std::string out = strf("%-5s %9s %9s %9s %10s %9s %9s %9s %9s %10s %10s\n", "epoch", "time_s", tokens ? "tokens/s" : "img/s",
                         "wait_s", "train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "tensor_MiB", "peak_MiB");
  for (const auto& ej : j.at("epochs")) {
    const EpochRecord e = ej.get<EpochRecord>();
    const std::string tensors = e.peakAllocatedBytes >= 0 ? strf("%.1f", e.peakAllocatedBytes / 1048576.0) : "-";
    out += strf("%-5lld %9.1f %9.0f %9.2f %10.4f %9.2f%% %9.4f %8.2f%% %8.2f%% %10s %10.1f\n", static_cast<long long>(e.epoch),
                e.timeS, e.tokensPerS.value_or(e.imagesPerS), e.dataWaitS, e.trainLoss, e.trainTop1, e.valLoss, e.valTop1, e.valTop5,
                tensors.c_str(), e.peakMemoryBytes / 1048576.0);
  }
  return out;
}

int cmdRun(const RunArgs& args) {
  return guarded("run", [&] {
    const DistEnv env = parseDistEnv();
    log::setRank(env.rank);
    const Spec spec = loadSpec(args.spec, args.sets);
    const std::string path = resultPathOf(args, spec);
    // A restarted worker (exprun launch / torchrun --max-restarts, Slurm requeue) resumes from the
    // newest checkpoint unless told otherwise.
    ResumeRequest resume{args.resume, args.force};
    if (resume.what.empty() && env.restartCount > 0) resume.what = "auto";
    if (std::filesystem::exists(path) && !args.overwrite && !resume.what.empty()) {
      // Its content is not trusted either way: the checkpoint's copy of the epochs rebuilds it. A
      // damaged one is said so.
      try {
        readResultFile(path);
        log::info("resuming: the result file '" + path + "' will be continued from the checkpoint's epochs");
      } catch (const std::exception& e) {
        log::warn("resuming: the result file '" + path + "' is damaged (" + e.what() +
                  "); it is rebuilt from the checkpoint's copy of the epochs");
      }
    } else if (std::filesystem::exists(path) && !args.overwrite) {
      log::error("run: result file '" + path + "' already exists; pass --overwrite to replace it (nothing was trained)");
      return kExitBadInput;
    }
    return train(spec, env, resume, path);
  });
}

int cmdProfile(RunArgs args, std::int64_t start, std::int64_t steps) {
  // The user's --set come first: the window's keys are the command's.
  args.sets.insert(args.sets.begin(), "train.eval=false");
  args.sets.push_back("train.profile.start_step=" + std::to_string(start));
  args.sets.push_back("train.profile.steps=" + std::to_string(steps));
  args.sets.push_back("train.max_steps=" + std::to_string(start + steps));
  args.overwrite = true;
  if (args.outDir.empty()) {
    const int bad = guarded("profile", [&] {
      args.outDir = (std::filesystem::path(loadSpec(args.spec, args.sets).output.dir) / "profile").string();
      return 0;
    });
    if (bad != 0) return bad;
  }
  return cmdRun(args);
}

int cmdLaunch(LaunchArgs launch, const RunArgs& run) {
  launch.workerArgs = {"run", run.spec};
  for (const auto& s : run.sets) launch.workerArgs.insert(launch.workerArgs.end(), {"--set", s});
  if (!run.outDir.empty()) launch.workerArgs.insert(launch.workerArgs.end(), {"--out", run.outDir});
  if (run.overwrite) launch.workerArgs.push_back("--overwrite");
  if (!run.resume.empty()) launch.workerArgs.insert(launch.workerArgs.end(), {"--resume", run.resume});
  if (run.force) launch.workerArgs.push_back("--force");
  return guarded("launch", [&] { return launchWorkers(launch); });
}

int cmdValidate(const std::string& specPath, const std::vector<std::string>& sets) {
  return guarded("validate", [&] {
    const Spec spec = loadSpec(specPath, sets);
    std::shared_ptr<Model> model;
    try {
      model = buildModel(spec);
    } catch (const DataError& e) {  // a model shaped by its data's files (a vocabulary) that are not here
      std::cout << spec.toYaml();
      std::cout << "# model parameters: not counted: " << e.what() << "\n";
      return kExitOk;
    }
    std::cout << spec.toYaml();
    std::cout << "# model parameters: " << countParameters(*model) << "\n";
    try {
      const StepFlops f = countSpecFlops(spec);
      const std::string unit = build<TaskKind>(spec.task)->unit() == "tokens" ? "token" : "image";
      std::cout << strf("# FLOPs per %s: forward %.4g, training step %.4g (counted on the task's probe batch)\n",
                        unit.c_str(), f.forward, f.total);
    } catch (const c10::Error& e) {  // a model shaped for other images (model.in_channels) cannot take the data's
      std::cout << "# FLOPs per image: not counted: the model does not take the data plugin's images\n";
    }
    return kExitOk;
  });
}

int cmdPrepareText(const std::string& input, const std::string& outDir) {
  return guarded("prepare-text", [&] {
    const PreparedText p = prepareCharText(input, outDir);
    std::printf("%s: %lld characters, vocabulary of %lld; %lld training and %lld validation tokens in %s/{train,val}.bin, "
                "meta.json\n",
                input.c_str(), static_cast<long long>(p.characters), static_cast<long long>(p.vocabSize),
                static_cast<long long>(p.trainTokens), static_cast<long long>(p.valTokens), outDir.c_str());
    return kExitOk;
  });
}

int cmdSample(const SampleArgs& a) {
  return guarded("sample", [&] {
    const CheckpointModel c = loadCheckpointModel(a.checkpoint, a.ema);
    if (c.info.vocabSize <= 0)
      throw std::invalid_argument(c.dir + ": the model of task '" + c.spec.task.type() + "' is not a language model");
    std::string meta = a.meta;
    if (meta.empty()) {
      if (!c.spec.data.has("dir")) throw std::invalid_argument("give --meta: the spec's data plugin names no dir");
      meta = std::get<std::string>(c.spec.data.value("dir")) + "/meta.json";
    }
    const CharVocabulary vocab = readCharVocabulary(meta);
    if (static_cast<std::int64_t>(vocab.itos.size()) != c.info.vocabSize)
      throw std::invalid_argument(meta + ": a vocabulary of " + std::to_string(vocab.itos.size()) + ", the model's has " +
                                  std::to_string(c.info.vocabSize));
    const std::vector<std::uint16_t> prompt = vocab.encode(a.prompt.empty() ? "\n" : a.prompt);
    std::vector<std::int64_t> ids(prompt.begin(), prompt.end());
    const std::int64_t context = c.info.sequenceLength;
    torch::manual_seed(static_cast<std::uint64_t>(a.seed));
    c.model->eval();
    torch::NoGradGuard noGrad;
    for (std::int64_t i = 0; i < a.tokens; ++i) {  // nanoGPT's generate(): the last block_size tokens each time
      const std::size_t from = ids.size() > static_cast<std::size_t>(context) ? ids.size() - static_cast<std::size_t>(context) : 0;
      const torch::Tensor idx = torch::tensor(std::vector<std::int64_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end()),
                                              torch::kInt64).unsqueeze(0);
      torch::Tensor logits = c.model->forward(idx).select(1, -1).squeeze(0) / a.temperature;
      if (a.topK > 0 && a.topK < logits.size(0)) {
        const torch::Tensor kth = std::get<0>(logits.topk(a.topK)).min();
        logits = logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
      }
      ids.push_back(torch::multinomial(torch::softmax(logits, 0), 1).item<std::int64_t>());
    }
    std::cout << vocab.decode(ids) << std::endl;
    return kExitOk;
  });
}

int cmdExport(const std::string& checkpoint, const std::string& format, const std::string& out, bool ema) {
  return guarded("export", [&] {
    if (format != "safetensors")
      throw std::invalid_argument("unknown --format '" + format + "' (supported: safetensors)");
    exportSafetensors(checkpoint, out, ema);
    log::info("wrote " + out);
    return kExitOk;
  });
}

int cmdPlan(const PlanArgs& a) {
  return guarded("plan", [&] {
    const Spec spec = loadSpec(a.spec, a.sets);
    std::string text;
    const nlohmann::json j = a.forDevice.empty() ? planHere(spec, a, text) : planForDevices(spec, a, text);
    if (j.is_null()) return kExitOk;  // not rank 0
    std::cout << text << std::flush;
    if (!a.jsonOut.empty()) writeFileAtomically(a.jsonOut, j.dump(2) + "\n");
    return kExitOk;
  });
}

int cmdProject(const ProjectArgs& a) {
  return guarded("project", [&] {
    std::vector<Spec> specs;
    for (const auto& path : a.specs) specs.push_back(loadSpec(path, a.sets));
    std::vector<int> gpus = a.gpus;
    if (gpus.size() == 1) gpus.assign(specs.size(), gpus.front());
    ProjectionOptions o;
    o.device = a.device;
    o.calibrateOn = a.calibrateOn;
    o.imagesPerEpoch = a.images;
    o.linkBytesPerS = a.linkGbps * 1e9;
    const Projection p = project(specs, gpus, o);
    const std::string md = p.markdown();
    std::cout << md << std::flush;
    if (!a.mdOut.empty()) writeFileAtomically(a.mdOut, md);
    if (!a.jsonOut.empty()) writeFileAtomically(a.jsonOut, p.toJson().dump(2) + "\n");
    return kExitOk;
  });
}

int cmdPeak(const std::string& deviceName, const std::string& precision, int threads, bool refresh) {
  return guarded("peak", [&] {
    if (threads > 0) compat::setThreads(threads);
    const torch::Device device(deviceName == "cuda" ? torch::kCUDA : torch::kCPU);
    if (device.is_cuda() && !torch::cuda::is_available()) throw std::invalid_argument("--device cuda: no CUDA device");
    const Precision prec = precision == "bf16" ? Precision::Bf16 : precision == "fp16" ? Precision::Fp16 : Precision::Fp32;
    const PeakFlops p = peakFlops(device, autocastDtype(prec).value_or(torch::kFloat), refresh);
    std::cout << strf("measured GEMM peak: %.4g FLOP/s  (%s; %s; cache %s/peak_flops.json)\n", p.flopsPerS,
                      p.key.c_str(),
                      p.cached      ? "cached"
                      : p.cacheable ? "measured now, cached"
                                    : "measured now, not cached: the two measurements differed by more than 5 % or the "
                                      "machine was busy",
                      cacheDir().c_str());
    const PeakRule rule = peakRule(device, prec, at::get_num_threads());
    if (rule.flopsPerS <= 0) {
      std::cout << "rule: none fits this device; MFU is against the measured peak\n";
    } else {
      std::cout << strf("rule (MFU's denominator): %.4g FLOP/s  (%s)\nmeasured / rule: %.1f %%\n", rule.flopsPerS,
                        rule.how.c_str(), 100 * p.flopsPerS / rule.flopsPerS);
      if (!rule.native) std::cout << "no native " << precision << " arithmetic here (needs " << rule.missing << ")\n";
    }
    return kExitOk;
  });
}

}  // namespace exprun
