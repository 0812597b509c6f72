// Purpose: one trial of `exprun tune` as a child process (see TuneTrial.h).
#include "runner/tune/TuneTrial.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"
#include "runner/util/ExitCodes.h"
#include "runner/util/Format.h"
#include "runner/util/Spawn.h"

namespace exprun {
namespace {

volatile sig_atomic_t gStop = 0;
volatile pid_t gTrial = 0;
struct sigaction gOldInt {}, gOldTerm{};

extern "C" void onTuneSignal(int sig) {
  gStop = sig;
  if (gTrial > 0) ::kill(-gTrial, SIGTERM);
}

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Waits for `pid` until `deadline`; then SIGTERM to its group, SIGKILL 15 s later. Returns the exit
// code and whether it had to be stopped.
std::pair<int, bool> waitUntil(pid_t pid, double deadline) {
  bool stopped = false;
  double killAt = 0;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return {exitCodeOf(status), stopped};
    if (r < 0 && errno != EINTR) return {kExitFailure, stopped};
    const double t = monotonicSeconds();
    if (!stopped && (t > deadline || gStop)) {
      stopped = true;
      killAt = t + 15;
      ::kill(-pid, SIGTERM);
    } else if (stopped && t > killAt) {
      ::kill(-pid, SIGKILL);
      killAt = t + 3600;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The last "[error]" line of a trial's log (what a failed run said), or its last line.
std::string lastError(const std::string& log) {
  std::istringstream in(log);
  std::string line, error, last;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    last = line;
    if (line.find("[error]") != std::string::npos) error = line;
  }
  std::string s = error.empty() ? last : error;
  const auto p = s.find("[error] ");
  if (p != std::string::npos) s = s.substr(p + 8);
  return s.size() > 300 ? s.substr(0, 300) + "..." : s;
}

// Memory and MFU from the trial's result file (nothing when it is missing or unreadable).
void readResult(const std::string& path, TrialResult& t) {
  try {
    const ResultFile r = readResultFile(path);
    for (const auto& e : r.epochs) {
      t.peakBytes = std::max(t.peakBytes, e.peakMemoryBytes);  // the largest rank's
      t.tensorBytes = std::max(t.tensorBytes, e.peakAllocatedBytes);
    }
    const auto& p = r.provenance;
    const double flops = p.value("flops_per_image", 0.0), peak = p.value("peak_flops_per_s", 0.0);
    if (flops > 0 && peak > 0 && t.imagesPerS > 0) t.mfu = flops * t.imagesPerS / peak;
  } catch (const std::exception&) {
  }
}

}  // namespace

double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

TrialSignals::TrialSignals() {
  gStop = 0;
  struct sigaction sa {};
  sa.sa_handler = onTuneSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &gOldInt);
  ::sigaction(SIGTERM, &sa, &gOldTerm);
}

TrialSignals::~TrialSignals() {
  ::sigaction(SIGINT, &gOldInt, nullptr);
  ::sigaction(SIGTERM, &gOldTerm, nullptr);
}

std::vector<std::string> trialArguments(const TrialRunner& r, const Setting& s, std::int64_t steps,
                                        const std::string& name) {
  std::vector<std::string> a;
  if (s.procs > 1)
    a = {"launch", "--nproc-per-node", std::to_string(s.procs), "--grace-s", "2", r.specPath};
  else
    a = {"run", r.specPath};
  std::vector<std::string> sets = r.userSets;
  for (const auto& x : settingSets(s, r.written)) sets.push_back(x);
  // Methods that change the training resolution hold its largest (progressive resizing's end size).
  for (const auto& x : {"train.eval=false", "train.log_every=0", "train.largest_resolution=true",
                        "output.tensorboard=false", "output.steps_csv=true",
                        "output.save_weights=false", "output.checkpoint.every_steps=0",
                        "output.checkpoint.every_epochs=0"})
    sets.push_back(x);
  // Enough epochs for the steps asked (the schedule's shape does not change the time of a step).
  sets.push_back("train.epochs=100000");
  sets.push_back("train.max_steps=" + std::to_string(r.warmupSteps + steps));
  sets.push_back("name=" + name);
  for (const auto& x : sets) a.insert(a.end(), {"--set", x});
  a.insert(a.end(), {"--out", r.workDir, "--overwrite"});
  return a;
}

TrialResult timingFromCsv(const std::string& csv, std::int64_t warmup, std::int64_t globalBatch, double wallS) {
  TrialResult t;
  t.wallS = wallS;
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);  // the header; time_s is the last column
  double t0 = -1, t1 = -1;
  std::int64_t last = 0;
  while (std::getline(in, line)) {
    const auto comma = line.find(','), lastComma = line.rfind(',');
    if (comma == std::string::npos || lastComma == comma) continue;
    try {
      const std::int64_t step = std::stoll(line.substr(0, comma));
      const double time = std::stod(line.substr(lastComma + 1));
      if (step == warmup) t0 = time;
      if (step > warmup && t0 >= 0) {
        last = step;
        t1 = time;
      }
    } catch (const std::exception&) {
    }
  }
  if (t0 < 0 || last < warmup + 2 || t1 <= t0) {
    t.failure = strf("too few steps to time (%lld after %lld warm-up)", static_cast<long long>(std::max<std::int64_t>(0, last - warmup)),
                     static_cast<long long>(warmup));
    return t;
  }
  t.stepS = (t1 - t0) / static_cast<double>(last - warmup);
  t.imagesPerS = static_cast<double>(globalBatch) / t.stepS;
  t.overheadS = std::max(0.0, wallS - (t1 - t0));
  t.ok = true;
  return t;
}

TrialResult runTrial(const TrialRunner& r, const Setting& s, std::int64_t steps, double limitS, int number) {
  if (gStop) throw TuneInterrupted("tune: interrupted");
  const std::string name = "trial-" + std::to_string(number);
  const RunPaths files(r.workDir, name);
  SpawnOptions o;
  o.who = "tune";
  o.logFile = files.beside(".log");
  const double start = monotonicSeconds();
  const pid_t pid = spawn(r.exe, trialArguments(r, s, steps, name), o).pid;
  gTrial = pid;
  const auto [code, stopped] = waitUntil(pid, start + limitS);
  gTrial = 0;
  const double wall = monotonicSeconds() - start;
  if (gStop) throw TuneInterrupted("tune: interrupted");
  TrialResult t = timingFromCsv(readText(files.stepsCsv()), r.warmupSteps, s.globalBatch() * r.unitsPerSample, wall);
  readResult(files.result(), t);
  if (stopped) {
    t.ok = false;
    t.failure = strf("too slow: stopped after %s (limit %s)", formatDuration(wall).c_str(), formatDuration(limitS).c_str());
  } else if (code != kExitOk) {
    t.ok = false;
    t.failure = strf("exit %d: ", code) + lastError(readText(o.logFile)) + " (log: " + o.logFile + ")";
  }
  return t;
}

}  // namespace exprun
