// Purpose: sweeps as Slurm job arrays (see SlurmSweep.h).
#include "runner/report/SlurmSweep.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runner/results/ResultFile.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"
#include "runner/util/Spawn.h"

namespace fs = std::filesystem;

namespace exprun {
namespace {

std::string abs(const std::string& p) { return fs::absolute(p).lexically_normal().string(); }
std::string specDirOf(const Sweep& s) { return (fs::path(s.outDir) / (s.baseName + "-sweep.slurm")).string(); }
std::string recordOf(const Sweep& s) { return (fs::path(s.outDir) / (s.baseName + "-sweep.slurm.json")).string(); }

// A value for a bash script, single-quoted.
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

std::string slurmArrayScript(const Sweep& sweep, const SlurmArrayOptions& o, const std::string& specDir) {
  const int tasks = o.tasksPerNode > 0 ? o.tasksPerNode : (o.gpusPerNode > 0 ? o.gpusPerNode : 1);
  const std::string out = abs(sweep.outDir);
  std::string s = "#!/bin/bash\n";
  s += "# exprun sweep " + sweep.specPath + " --slurm: " + std::to_string(sweep.runs.size()) +
       " runs, one array task each (task i: line i+1 of runs.txt)\n";
  s += "#SBATCH --job-name=exprun-" + sweep.baseName + "\n";
  s += "#SBATCH --array=0-" + std::to_string(sweep.runs.size() - 1) + "\n";
  s += "#SBATCH --nodes=" + std::to_string(o.nodes) + "\n";
  s += "#SBATCH --ntasks-per-node=" + std::to_string(tasks) + "\n";
  if (o.gpusPerNode > 0) s += "#SBATCH --gpus-per-node=" + std::to_string(o.gpusPerNode) + "\n";
  if (!o.partition.empty()) s += "#SBATCH --partition=" + o.partition + "\n";
  if (!o.time.empty()) s += "#SBATCH --time=" + o.time + "\n";
  s += "# SIGUSR1 " + std::to_string(o.signalS) +
       " s before the time limit: each rank saves at the same step, the run requeues its task\n";
  s += "#SBATCH --signal=USR1@" + std::to_string(o.signalS) + "\n";
  s += "#SBATCH --requeue\n";
  s += "#SBATCH --open-mode=append\n";
  s += "#SBATCH --output=" + out + "/slurm-%A_%a.out\n";
  for (const auto& a : o.sbatchArgs) s += "#SBATCH " + a + "\n";
  s += "set -euo pipefail\n";
  s += "SPEC=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" " + quoted(abs(specDir) + "/runs.txt") + ")\n";
  s += "# The rendezvous: the first node of the task hosts the store, on a port of the task's own job id.\n";
  s += "export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n";
  s += "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n";
  s += "echo \"exprun: task $SLURM_ARRAY_TASK_ID (job $SLURM_JOB_ID), attempt $((${SLURM_RESTART_COUNT:-0} + 1)): $SPEC\"\n";
  // A requeued task (SLURM_RESTART_COUNT > 0) resumes from its newest checkpoint by itself.
  s += "srun --kill-on-bad-exit=1 " + quoted(o.exe) + " run \"$SPEC\" --out " + quoted(out) +
       (o.overwrite ? " --overwrite" : "") + "\n";
  return s;
}

std::string writeSlurmArray(const Sweep& sweep, const SlurmArrayOptions& o) {
  const std::string dir = specDirOf(sweep);
  writeSweepSpecs(sweep, dir);
  const std::string script = (fs::path(sweep.outDir) / (sweep.baseName + "-sweep.sbatch")).string();
  writeFileAtomically(script, slurmArrayScript(sweep, o, dir));
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  return script;
}

std::string submitSlurmArray(const Sweep& sweep, const std::string& script) {
  CommandResult r;
  try {
    r = runCommand("sbatch", {"--parsable", script}, 60, "sweep");
  } catch (const std::exception& e) {
    throw SweepError(std::string(e.what()) + " (--slurm needs Slurm's sbatch)");
  }
  if (r.code != 0) throw SweepError("sbatch refused " + script + ": " + trimmed(r.err));
  std::string id = trimmed(r.out);
  if (const auto semi = id.find(';'); semi != std::string::npos) id = id.substr(0, semi);  // "id;cluster"
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    throw SweepError("sbatch printed no job id for " + script + ": '" + trimmed(r.out) + "'");
  nlohmann::json rec;
  rec["job_id"] = id;
  rec["base"] = sweep.baseName;
  rec["spec"] = sweep.specPath;
  rec["script"] = abs(script);
  rec["out"] = abs(sweep.outDir);
  nlohmann::json runs = nlohmann::json::array();
  const auto paths = sweep.resultPaths();
  for (std::size_t i = 0; i < sweep.runs.size(); ++i) {
    nlohmann::json run;
    run["task"] = i;
    run["name"] = sweep.runs[i].name;
    run["sets"] = sweep.runs[i].sets;
    run["result"] = abs(paths[i]);
    runs.push_back(run);
  }
  rec["runs"] = runs;
  writeFileAtomically(recordOf(sweep), rec.dump(2) + "\n");
  return id;
}

bool SlurmArrayState::finished() const {
  for (const auto& t : tasks)
    if (!t.slurm.empty() && t.slurm != "COMPLETED" && t.slurm != "CANCELLED" && t.slurm != "FAILED" &&
        t.slurm != "TIMEOUT" && t.slurm != "OUT_OF_MEMORY" && t.slurm != "NODE_FAIL" && t.slurm != "BOOT_FAIL" &&
        t.slurm != "DEADLINE")
      return false;
  return true;
}

SlurmArrayState slurmArrayState(const std::string& dir) {
  std::string record = dir;
  if (fs::is_directory(dir)) {
    record.clear();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.size() > 17 && n.substr(n.size() - 17) == "-sweep.slurm.json") {
        if (!record.empty())
          throw SweepError(dir + ": holds more than one Slurm sweep record (*-sweep.slurm.json); name one");
        record = e.path().string();
      }
    }
    if (record.empty()) throw SweepError(dir + ": no Slurm sweep here (no *-sweep.slurm.json; was it submitted?)");
  }
  nlohmann::json rec;
  try {
    std::ifstream in(record);
    if (!in) throw SweepError(record + ": cannot be read");
    rec = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw SweepError(record + ": not a Slurm sweep record: " + e.what());
  }
  SlurmArrayState s;
  try {
    s.jobId = rec.at("job_id").get<std::string>();
    s.baseName = rec.at("base").get<std::string>();
    s.outDir = rec.at("out").get<std::string>();
    for (const auto& r : rec.at("runs")) {
      SlurmTaskState t;
      t.name = r.at("name").get<std::string>();
      t.resultPath = r.at("result").get<std::string>();
      s.tasks.push_back(t);
    }
  } catch (const nlohmann::json::exception& e) {
    throw SweepError(record + ": not a Slurm sweep record: " + e.what());
  }
  // Slurm's view: every task still listed (-r: pending tasks one by one), "<task> <state>".
  try {
    const CommandResult r = runCommand("squeue", {"-h", "-r", "-j", s.jobId, "-o", "%K %T"}, 30, "sweep");
    if (r.code == 0) {
      std::istringstream lines(r.out);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream f(line);
        std::size_t task = 0;
        std::string state;
        if (f >> task >> state && task < s.tasks.size()) s.tasks[task].slurm = state;
      }
    } else {
      log::warn("sweep: squeue could not list job " + s.jobId + ": " + trimmed(r.err));
    }
  } catch (const std::exception& e) {
    log::warn(std::string("sweep: ") + e.what());
  }
  for (auto& t : s.tasks) {
    if (!fs::exists(t.resultPath)) continue;
    try {
      const ResultFile f = readResultFile(t.resultPath);
      t.status = f.status;
      t.epochs = static_cast<std::int64_t>(f.epochs.size());
      t.attempts = static_cast<int>(f.attempts.size());
    } catch (const std::exception& e) {
      t.status = "unreadable";
    }
  }
  return s;
}

std::string formatSlurmArrayState(const SlurmArrayState& s) {
  std::string out = strf("Slurm array %s (%s-sweep, %zu tasks)%s\n", s.jobId.c_str(), s.baseName.c_str(), s.tasks.size(),
                         s.finished() ? ": finished" : "");
  out += strf("%-5s %-40s %-12s %-12s %7s %9s\n", "task", "run", "slurm", "result", "epochs", "attempts");
  for (std::size_t i = 0; i < s.tasks.size(); ++i) {
    const auto& t = s.tasks[i];
    out += strf("%-5zu %-40s %-12s %-12s %7lld %9d\n", i, t.name.c_str(), t.slurm.empty() ? "done" : t.slurm.c_str(),
                t.status.empty() ? "-" : t.status.c_str(), static_cast<long long>(t.epochs), t.attempts);
  }
  return out;
}

bool writeSlurmArrayReport(const SlurmArrayState& s, const std::vector<std::string>& notCompleted) {
  std::vector<std::string> paths;
  for (const auto& t : s.tasks) paths.push_back(t.resultPath);
  return writeSweepReport(s.outDir, s.baseName, paths, notCompleted);
}

std::vector<std::string> waitForSlurmArray(const std::string& dir, double pollS) {
  SlurmArrayState s = slurmArrayState(dir);
  std::string last;
  while (!s.finished()) {
    const std::string now = formatSlurmArrayState(s);
    if (now != last) log::info("sweep: waiting for the array\n" + now);
    last = now;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<long>(pollS * 1000)));
    s = slurmArrayState(dir);
  }
  std::cout << formatSlurmArrayState(s) << std::flush;
  std::vector<std::string> notCompleted = notCompletedRuns(s);
  if (!writeSlurmArrayReport(s, notCompleted)) notCompleted.push_back("(report)");
  return notCompleted;
}

std::vector<std::string> notCompletedRuns(const SlurmArrayState& s) {
  std::vector<std::string> out;
  for (const auto& t : s.tasks)
    if (t.status != "completed") out.push_back(t.name + " (" + (t.status.empty() ? "no result file" : t.status) + ")");
  return out;
}

}  // namespace exprun
