// Purpose: the run's side of Slurm (see Slurm.h).
#include "runner/dist/Slurm.h"

#include <csignal>
#include <cstdlib>

#include "runner/util/Spawn.h"

namespace exprun {

std::string slurmJobId() {
  const char* id = std::getenv("SLURM_JOB_ID");
  return id ? id : "";
}

std::string slurmJobState(const std::string& jobId) {
  if (jobId.empty()) return "";
  try {
    const CommandResult r = runCommand("squeue", {"-h", "-j", jobId, "-o", "%T"}, 15, "slurm");
    if (r.code != 0) return "";
    std::string s = r.out;
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    const auto nl = s.find('\n');
    return nl == std::string::npos ? s : s.substr(0, nl);
  } catch (const std::exception&) {
    return "";
  }
}

bool requeueSlurmJob(const std::string& jobId, std::string& why) {
  try {
    const CommandResult r = runCommand("scontrol", {"requeue", jobId}, 30, "slurm");
    if (r.code == 0) return true;
    why = r.err.empty() ? "scontrol exited with " + std::to_string(r.code) : r.err;
    while (!why.empty() && why.back() == '\n') why.pop_back();
  } catch (const std::exception& e) {
    why = e.what();
  }
  return false;
}

std::string slurmStopStatus(const std::string& jobId, int signal) {
  if (signal == SIGUSR1) return "requeued";
  if (signal != SIGTERM) return "interrupted";
  const std::string state = slurmJobState(jobId);
  // scancel: the job is COMPLETING when its tasks get SIGTERM (gone already: the same).
  if (state.empty() || state == "CANCELLED" || state == "COMPLETING") return "cancelled";
  if (state == "RUNNING" || state == "PREEMPTED" || state.rfind("REQUEUE", 0) == 0) return "requeued";
  return "interrupted";  // e.g. TIMEOUT: killed at its limit without a signal before it
}

}  // namespace exprun
