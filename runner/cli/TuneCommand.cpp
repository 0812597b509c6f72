// Purpose: `exprun tune` (runner/tune/Tune.h) from the command line: this machine's description
// and native precisions, the search over child runs, the ranked table, the tuned spec and the JSON
// of every trial.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "runner/api/Data.h"
#include "runner/api/Kinds.h"
#include "runner/api/Task.h"
#include "runner/cli/Commands.h"
#include "runner/cli/Errors.h"
#include "runner/metrics/Flops.h"
#include "runner/metrics/Hardware.h"
#include "runner/tune/TuneTrial.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Compat.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"
#include "runner/util/Spawn.h"

namespace fs = std::filesystem;

namespace exprun {
namespace {

TuneMachine thisMachine(const Spec& spec) {
  TuneMachine m;
  const auto choice = spec.train.execution.device;
  m.cuda = choice == DeviceChoice::Cuda || (choice == DeviceChoice::Auto && compat::cudaAvailable());
  if (m.cuda && !compat::cudaAvailable()) throw std::invalid_argument("train.device is cuda, but no CUDA device is here");
  m.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  m.gpus = m.cuda ? compat::cudaDeviceCount() : 0;
  const torch::Device device(m.cuda ? torch::kCUDA : torch::kCPU);
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16})
    if (p == Precision::Fp32 || peakRule(device, p, m.cores).native) m.native.push_back(p);
  std::string native;
  for (Precision p : m.native) native += std::string(native.empty() ? "" : ", ") + precisionName(p);
  m.description = deviceName(device) +
                  (m.cuda ? strf(" x %d", m.gpus) : strf(" (%d CPU threads)", m.cores)) + "; native: " + native;
  return m;
}

TuneOptions optionsOf(const TuneArgs& a) {
  TuneOptions o;
  try {
    o.budgetS = parseDuration(a.timeBudget);
  } catch (const std::invalid_argument& e) {
    throw TuneError(std::string("--time-budget: ") + e.what());
  }
  if (o.budgetS < 1) throw TuneError("--time-budget: at least 1 s");
  if (!a.memoryBudget.empty() && !a.deviceMemory.empty())
    throw TuneError("--memory-budget and --device-memory: give one of them");
  const std::string& mem = a.memoryBudget.empty() ? a.deviceMemory : a.memoryBudget;
  if (!mem.empty()) {
    try {
      o.memoryBudgetBytes = parseBytes(mem);
    } catch (const std::invalid_argument& e) {
      throw TuneError((a.memoryBudget.empty() ? "--device-memory: " : "--memory-budget: ") + std::string(e.what()));
    }
  }
  if (a.nproc < 1) throw TuneError("--nproc: at least 1");
  if (a.maxProcs < 0) throw TuneError("--max-procs: at least 1 (0: the CPU threads)");
  o.nproc = a.nproc;
  o.maxProcs = a.maxProcs;
  if (!a.precisions.empty()) o.precisions = parsePrecisions(a.precisions);
  o.allowLossyComm = a.allowLossyComm;
  return o;
}

// A folder for the trials' files: --work, else a fresh one under the system's temporary folder.
std::string workFolder(const TuneArgs& a) {
  if (!a.workDir.empty()) {
    fs::create_directories(a.workDir);
    return a.workDir;
  }
  std::string tmpl = (fs::temp_directory_path() / "exprun-tune-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("tune: cannot make a folder under " + fs::temp_directory_path().string());
  return tmpl;
}

void checkWritable(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const fs::path folder = fs::absolute(path).parent_path();
  if (!fs::is_directory(folder))
    throw TuneError(std::string(flag) + " " + path + ": folder " + folder.string() + " does not exist");
}

void writeOutputs(const TuneArgs& a, const TuneOutcome& out, const Spec& spec, const TuneMachine& m, const TuneOptions& o) {
  const Setting& win = out.candidates[out.winner].setting;
  if (!a.write.empty()) {
    writeFileAtomically(a.write, tunedSpecYaml(out, a.spec, a.write, spec.name + "-tuned", a.sets, m));
    loadSpec(a.write);  // what tune writes must validate
    log::info("tune: tuned spec written to " + a.write + "; run it with: " + runCommand(win, a.write));
  } else {
    std::string cmd = runCommand(win, a.spec);
    for (const auto& s : a.sets) cmd += " --set " + s;
    for (const auto& s : settingSets(win, out.candidates[out.written].setting)) cmd += " --set " + s;
    log::info("tune: run the winner with: " + cmd);
  }
  if (!a.jsonOut.empty()) writeFileAtomically(a.jsonOut, tuneJson(out, a.spec, m, o).dump(2) + "\n");
}

}  // namespace

int cmdTune(const TuneArgs& a) {
  return guarded("tune", [&] {
    TuneOptions o = optionsOf(a);
    const Spec spec = loadSpec(a.spec, a.sets);
    const auto task = build<TaskKind>(spec.task);
    if (task->unit() == "tokens") {  // a language model: tokens/s, block_size a sample
      o.unit = "tokens";
      o.unitsPerSample = std::max<std::int64_t>(1, task->unitsPerSample(build<DataKind>(spec.data)->info()));
    }
    const TuneMachine m = thisMachine(spec);
    for (Precision p : o.precisions)
      if (std::find(m.native.begin(), m.native.end(), p) == m.native.end())
        log::warn(std::string("tune: ") + precisionName(p) + " has no native arithmetic here; it is measured anyway");
    checkWritable(a.write, "--write");
    checkWritable(a.jsonOut, "--json");
    const Setting written = writtenSetting(spec, m, o);
    const std::string work = workFolder(a);
    TrialRunner runner{a.exe.empty() ? selfExe() : a.exe, a.spec, a.sets, written, work, o.warmupSteps, o.unitsPerSample};
    int number = 0;
    const TrialFn trial = [&](const Setting& s, std::int64_t steps, double limit) {
      return runTrial(runner, s, steps, limit, ++number);
    };
    const ClockFn clock = monotonicSeconds;
    log::info(strf("tune: %s on %s, global batch %lld, budget %s; trials in %s", a.spec.c_str(), m.description.c_str(),
                   static_cast<long long>(written.globalBatch()), formatDuration(o.budgetS).c_str(), work.c_str()));
    TuneOutcome out;
    try {
      TrialSignals signals;
      out = runTune(layoutCandidates(written, m, o), [&](const Setting& b) { return refineCandidates(b, o); }, trial,
                    o, clock);
    } catch (const TuneInterrupted&) {
      log::warn("tune: interrupted; the trials so far are in " + work);
      return kExitInterrupted;
    }
    std::cout << tuneTable(out, o.memoryBudgetBytes) << std::flush;
    for (const auto& n : out.notes) log::info("tune: " + n);
    log::info(strf("tune: %d trials in %s (budget %s)", number, formatDuration(out.spentS).c_str(),
                   formatDuration(o.budgetS).c_str()));
    writeOutputs(a, out, spec, m, o);
    if (a.workDir.empty() && !a.keep) fs::remove_all(work);
    return kExitOk;
  });
}

}  // namespace exprun
