// Purpose: the library side of the CLI subcommands: run, validate, plugins.
#include "runner/cli/Commands.h"

#include "runner/step/Step.h"

#include <csignal>
#include <filesystem>
#include <iostream>

#include "runner/api/Model.h"
#include "runner/checkpoint/Export.h"
#include "runner/dist/DistEnv.h"
#include "runner/metrics/Flops.h"
#include "runner/plan/MemoryEstimate.h"
#include "runner/plan/Planner.h"
#include "runner/plan/Projection.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/Spec.h"
#include "runner/step/Device.h"
#include "runner/train/Setup.h"
#include "runner/train/Trainer.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/CacheDir.h"
#include "runner/util/Compat.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

extern "C" void onStopSignal(int sig) {
  stopRequested().store(true);
  std::signal(sig, SIG_DFL);  // a second signal ends the process at once
}

}  // namespace

std::string epochTable(const std::string& resultJson) {
  auto j = nlohmann::json::parse(resultJson);
  std::string out = strf("%-5s %9s %9s %9s %10s %9s %9s %9s %9s %10s %10s\n", "epoch", "time_s", "img/s", "wait_s",
                         "train_loss", "train_top1", "val_loss", "val_top1", "val_top5", "tensor_MiB", "peak_MiB");
  for (const auto& ej : j.at("epochs")) {
    const EpochRecord e = ej.get<EpochRecord>();
    const std::string tensors = e.peakAllocatedBytes >= 0 ? strf("%.1f", e.peakAllocatedBytes / 1048576.0) : "-";
    out += strf("%-5lld %9.1f %9.0f %9.2f %10.4f %9.2f%% %9.4f %8.2f%% %8.2f%% %10s %10.1f\n", static_cast<long long>(e.epoch),
                e.timeS, e.imagesPerS, e.dataWaitS, e.trainLoss, e.trainTop1, e.valLoss, e.valTop1, e.valTop5,
                tensors.c_str(), e.peakMemoryBytes / 1048576.0);
  }
  return out;
}

int cmdRun(const RunArgs& args) {
  DistEnv env;
  try {
    env = parseDistEnv();
  } catch (const DistError& e) {
    log::error(e.what());
    return kExitBadInput;
  }
  log::setRank(env.rank);
  Spec spec;
  try {
    spec = loadSpec(args.spec, args.sets);
  } catch (const SpecError& e) {
    log::error(e.what());
    return kExitBadInput;
  }
  const std::string dir = args.outDir.empty() ? spec.output.dir : args.outDir;
  const std::string path = (std::filesystem::path(dir) / (spec.name + ".json")).string();
  // A restarted worker (exprun launch / torchrun --max-restarts, Slurm requeue) resumes from the
  // newest checkpoint unless told otherwise.
  ResumeRequest resume{args.resume, args.force};
  if (resume.what.empty() && env.restartCount > 0) resume.what = "auto";
  if (std::filesystem::exists(path) && !args.overwrite && !resume.what.empty()) {
    log::info("resuming: the result file '" + path + "' will be continued from the checkpoint's epochs");
  } else if (std::filesystem::exists(path) && !args.overwrite) {
    log::error("result file '" + path + "' already exists; pass --overwrite to replace it (nothing was trained)");
    return kExitBadInput;
  }
  stopRequested().store(false);
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  std::unique_ptr<Dist> dist;
  try {
    dist = Dist::join(env, chooseBackend(spec), spec.distributed.timeoutS);
    dist->checkSameSpec(spec.hash());
  } catch (const DistError& e) {
    log::error(e.what());
    return kExitBadInput;
  }
  try {
    Trainer trainer(spec, dist.get());
    trainer.setResume(resume);
    TrainOutcome outcome = trainer.run(path);
    if (env.rank != 0) return outcome.interrupted ? kExitInterrupted : kExitOk;
    log::info("result file: " + path);
    std::cout << epochTable(outcome.result.dump()) << std::flush;
    if (outcome.interrupted) {
      log::warn("interrupted: the result file holds the " + std::to_string(outcome.result["epochs"].size()) +
                " completed epoch(s)");
      return kExitInterrupted;
    }
    return kExitOk;
  } catch (const DataError& e) {
    log::error(e.what());
    return kExitBadInput;
  } catch (const DistError& e) {
    log::error(e.what());
    return kExitBadInput;
  } catch (const CheckpointError& e) {
    log::error(std::string("checkpoint: ") + e.what());
    return kExitBadInput;
  } catch (const NonFiniteError& e) {
    log::error(e.what());
    return kExitFailure;
  } catch (const std::invalid_argument& e) {
    log::error(e.what());
    return kExitBadInput;
  } catch (const c10::Error& e) {
    log::error(std::string("training failed: ") + e.what_without_backtrace());
    return kExitFailure;
  } catch (const std::exception& e) {
    log::error(std::string("training failed: ") + e.what());
    return kExitFailure;
  }
}

int cmdValidate(const std::string& specPath, const std::vector<std::string>& sets) {
  try {
    Spec spec = loadSpec(specPath, sets);
    auto model = buildModel(spec);
    std::cout << spec.toYaml();
    std::cout << "# model parameters: " << countParameters(*model) << "\n";
    try {
      const StepFlops f = countSpecFlops(spec);
      std::cout << strf("# FLOPs per image: forward %.4g, training step %.4g (counted at the data's image shape)\n",
                        f.forward, f.total);
    } catch (const c10::Error& e) {  // a model shaped for other images (model.in_channels) cannot take the data's
      std::cout << "# FLOPs per image: not counted: the model does not take the data plugin's images\n";
    }
    return kExitOk;
  } catch (const SpecError& e) {
    log::error(e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    log::error(std::string(specPath) + ": " + e.what());
    return kExitBadInput;
  }
}

int cmdPlan(const PlanArgs& a) {
  try {
    Spec spec = loadSpec(a.spec, a.sets);
    std::string text;
    nlohmann::json j;
    if (!a.forDevice.empty()) {  // an estimate for cards this machine does not have; one process
      CardTarget target;
      target.device = a.forDevice;
      target.deviceMemory = parseBytes(a.deviceMemory);
      target.gpus = a.gpus;
      target.globalBatch = a.globalBatch;
      target.probeBatches = a.probeBatches;
      target.allowance.context = parseBytes(a.context);
      target.allowance.workspace = parseBytes(a.workspace);
      target.allowance.fragmentation = a.fragmentation;
      const CardPlan plan = planForCard(spec, target);
      text = plan.table();
      j = plan.toJson();
    } else {
      if (a.budget.empty()) throw std::invalid_argument("give --memory-budget (plan here) or --for cuda --device-memory");
      DistEnv env = parseDistEnv();
      log::setRank(env.rank);
      const std::int64_t budget = parseBytes(a.budget);
      auto dist = Dist::join(env, chooseBackend(spec), spec.distributed.timeoutS);
      const torch::Device device = chooseDevice(spec, env);
      dist->setDevice(device);
      std::int64_t globalBatch = a.globalBatch;
      if (globalBatch <= 0) globalBatch = spec.train.batching.globalBatch;
      if (globalBatch <= 0) globalBatch = spec.train.batching.batchSize.value_or(1) * dist->worldSize() * spec.train.batching.accumulate;
      MemoryPlan plan = planMemory(spec, budget, globalBatch, *dist, device);
      if (env.rank != 0) return kExitOk;
      text = plan.table();
      j = plan.toJson();
    }
    std::cout << text << std::flush;
    if (!a.jsonOut.empty()) writeFileAtomically(a.jsonOut, j.dump(2) + "\n");
    return kExitOk;
  } catch (const SpecError& e) {
    log::error(e.what());
  } catch (const DistError& e) {
    log::error(e.what());
  } catch (const std::invalid_argument& e) {
    log::error(std::string("plan: ") + e.what());
  } catch (const c10::Error& e) {  // e.g. a model that does not fit the data's shape
    log::error(std::string("plan: ") + e.what_without_backtrace());
    return kExitFailure;
  } catch (const std::exception& e) {  // e.g. --json not writable
    log::error(std::string("plan: ") + e.what());
    return kExitFailure;
  }
  return kExitBadInput;
}

int cmdProject(const ProjectArgs& a) {
  try {
    std::vector<Spec> specs;
    for (const auto& path : a.specs) specs.push_back(loadSpec(path, a.sets));
    std::vector<int> gpus = a.gpus;
    if (gpus.size() == 1) gpus.assign(specs.size(), gpus.front());
    ProjectionOptions o;
    o.card = a.card;
    o.calibrateOn = a.calibrateOn;
    o.imagesPerEpoch = a.images;
    o.linkBytesPerS = a.linkGbps * 1e9;
    const Projection p = project(specs, gpus, o);
    const std::string md = p.markdown();
    std::cout << md << std::flush;
    if (!a.mdOut.empty()) writeFileAtomically(a.mdOut, md);
    if (!a.jsonOut.empty()) writeFileAtomically(a.jsonOut, p.toJson().dump(2) + "\n");
    return kExitOk;
  } catch (const SpecError& e) {
    log::error(e.what());
  } catch (const std::invalid_argument& e) {
    log::error(std::string("project: ") + e.what());
  } catch (const c10::Error& e) {
    log::error(std::string("project: ") + e.what_without_backtrace());
    return kExitFailure;
  } catch (const std::exception& e) {
    log::error(std::string("project: ") + e.what());
    return kExitFailure;
  }
  return kExitBadInput;
}

int cmdPeak(const std::string& deviceName, const std::string& precision, int threads, bool refresh) {
  try {
    if (threads > 0) compat::setThreads(threads);
    const torch::Device device(deviceName == "cuda" ? torch::kCUDA : torch::kCPU);
    if (device.is_cuda() && !torch::cuda::is_available()) throw std::invalid_argument("--device cuda: no CUDA device");
    const torch::ScalarType dtype = precision == "bf16"   ? torch::kBFloat16
                                    : precision == "fp16" ? torch::kHalf
                                                          : torch::kFloat;
    const PeakFlops p = peakFlops(device, dtype, refresh);
    std::cout << strf("%.4g FLOP/s  (%s; %s; cache %s/peak_flops.json)\n", p.flopsPerS, p.key.c_str(),
                      p.cached ? "cached" : "measured now", cacheDir().c_str());
    return kExitOk;
  } catch (const std::exception& e) {
    log::error(std::string("peak: ") + e.what());
    return kExitBadInput;
  }
}

int cmdPlugins(const std::string& kind) {
  const auto& cat = Catalog::instance();
  auto kinds = cat.kinds();
  if (!kind.empty()) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      std::string valid;
      for (const auto& k : kinds) valid += (valid.empty() ? "" : ", ") + k;
      log::error("unknown plugin kind '" + kind + "'" + didYouMean(kind, kinds) + "; valid: " + valid);
      return kExitBadInput;
    }
    kinds = {kind};
  }
  auto printDecls = [](const std::string& title, const OptionDecls& decls) {
    std::cout << title << "\n";
    for (const auto& d : decls) {
      std::string def = d.defaultValue ? valueToString(*d.defaultValue) : "(required)";
      std::string extra;
      if (!d.choices.empty()) {
        extra = " {";
        for (size_t i = 0; i < d.choices.size(); ++i) extra += (i ? "|" : "") + d.choices[i];
        extra += "}";
      }
      if (d.min || d.max)
        extra += " [" + (d.min ? valueToString(Value{*d.min}) : std::string("")) + ".." +
                 (d.max ? valueToString(Value{*d.max}) : std::string("")) + "]";
      std::cout << strf("    %-22s %-12s %-14s %s%s\n", d.name.c_str(), optionTypeName(d.type), def.c_str(),
                        d.help.c_str(), extra.c_str());
    }
  };
  for (const auto& k : kinds) {
    std::cout << k << ":\n";
    for (const auto& name : cat.names(k)) {
      const PluginInfo* info = cat.find(k, name);
      printDecls("  " + name + " — " + info->help, info->options);
    }
  }
  if (kind.empty()) {
    std::cout << "sections:\n";
    for (const auto& s : specSections())
      if (s.pluginKind.empty()) printDecls("  " + s.path, s.decls);
  }
  return kExitOk;
}

}  // namespace exprun

namespace exprun {

int cmdExport(const std::string& checkpoint, const std::string& format, const std::string& out, bool ema) {
  if (format != "safetensors") {
    log::error("export: unknown --format '" + format + "' (supported: safetensors)");
    return kExitBadInput;
  }
  try {
    exportSafetensors(checkpoint, out, ema);
    log::info("wrote " + out);
    return kExitOk;
  } catch (const CheckpointError& e) {
    log::error(std::string("export: ") + e.what());
    return kExitBadInput;
  } catch (const SpecError& e) {
    log::error(std::string("export: the checkpoint's spec: ") + e.what());
    return kExitBadInput;
  } catch (const std::exception& e) {
    log::error(std::string("export: ") + e.what());
    return kExitFailure;
  }
}

}  // namespace exprun
