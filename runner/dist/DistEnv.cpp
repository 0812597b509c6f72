// Purpose: rendezvous environment parsing (see DistEnv.h).
#include "runner/dist/DistEnv.h"

#include <cstdlib>
#include <regex>

namespace exprun {
namespace {

struct Reader {
  const GetEnv& get;
  const char* raw(const char* name) const {
    const char* v = get(name);
    return (v && *v) ? v : nullptr;
  }
  bool has(const char* name) const { return raw(name) != nullptr; }
  int integer(const char* name, int lo, int hi, const std::string& why) const {
    const char* v = raw(name);
    if (!v) throw DistError("environment: " + std::string(name) + " is not set (" + why + ")");
    static const std::regex re("^[0-9]+");
    std::cmatch m;
    if (!std::regex_search(v, m, re))
      throw DistError("environment: " + std::string(name) + "='" + v + "' is not a non-negative integer");
    long x = std::strtol(m.str().c_str(), nullptr, 10);
    if (x < lo || x > hi)
      throw DistError("environment: " + std::string(name) + "=" + v + " is out of range [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
    return static_cast<int>(x);
  }
  int integerOr(const char* name, int def, int lo, int hi) const {
    return has(name) ? integer(name, lo, hi, "") : def;
  }
};

void checkConsistent(const DistEnv& e, const std::string& rankVar, const std::string& worldVar,
                     const std::string& localVar, const std::string& localWorldVar) {
  if (e.worldSize < 1) throw DistError("environment: " + worldVar + "=" + std::to_string(e.worldSize) + " must be at least 1");
  if (e.rank >= e.worldSize)
    throw DistError("environment: " + rankVar + "=" + std::to_string(e.rank) + " is not below " + worldVar + "=" +
                    std::to_string(e.worldSize));
  if (e.localWorldSize < 1 || e.localWorldSize > e.worldSize)
    throw DistError("environment: " + localWorldVar + "=" + std::to_string(e.localWorldSize) + " must be between 1 and " +
                    worldVar + "=" + std::to_string(e.worldSize));
  if (e.localRank >= e.localWorldSize)
    throw DistError("environment: " + localVar + "=" + std::to_string(e.localRank) + " is not below " + localWorldVar + "=" +
                    std::to_string(e.localWorldSize));
}

}  // namespace

DistEnv parseDistEnv(const GetEnv& getenvFn) {
  GetEnv get = getenvFn ? getenvFn : GetEnv([](const char* n) { return std::getenv(n); });
  Reader r{get};
  DistEnv e;
  auto master = [&](bool required) {
    if (r.has("MASTER_ADDR")) e.masterAddr = r.raw("MASTER_ADDR");
    else if (required) throw DistError("environment: MASTER_ADDR is not set (export it in the job script: the host of rank 0)");
    if (r.has("MASTER_PORT")) e.masterPort = r.integer("MASTER_PORT", 1, 65535, "");
    else if (required) throw DistError("environment: MASTER_PORT is not set (export it in the job script: a free port on rank 0's host)");
  };
  if (r.has("RANK") || r.has("WORLD_SIZE")) {
    e.launcher = r.has("EXPRUN_LAUNCHER") ? "exprun-launch" : "torchrun";
    e.rank = r.integer("RANK", 0, 1 << 20, "set by torchrun or exprun launch together with WORLD_SIZE");
    e.worldSize = r.integer("WORLD_SIZE", 1, 1 << 20, "set by torchrun or exprun launch together with RANK");
    e.localRank = r.integerOr("LOCAL_RANK", e.rank, 0, 1 << 20);
    e.localWorldSize = r.integerOr("LOCAL_WORLD_SIZE", e.worldSize, 1, 1 << 20);
    master(e.worldSize > 1);
    const char* agent = r.raw("TORCHELASTIC_USE_AGENT_STORE");
    e.useAgentStore = agent && std::string(agent) == "True";
    e.restartCount = r.integerOr("TORCHELASTIC_RESTART_COUNT", 0, 0, 1 << 20);
    checkConsistent(e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
  } else if (r.has("SLURM_PROCID") && r.has("SLURM_NTASKS")) {
    e.launcher = "slurm";
    e.rank = r.integer("SLURM_PROCID", 0, 1 << 20, "");
    e.worldSize = r.integer("SLURM_NTASKS", 1, 1 << 20, "");
    e.localRank = r.integerOr("SLURM_LOCALID", 0, 0, 1 << 20);
    // SLURM_NTASKS_PER_NODE (set with --ntasks-per-node) or SLURM_TASKS_PER_NODE (always set) read
    // like "4" or "4(x2)": the leading number is this node's count.
    e.localWorldSize = r.has("SLURM_NTASKS_PER_NODE") ? r.integer("SLURM_NTASKS_PER_NODE", 1, 1 << 20, "")
                                                      : r.integerOr("SLURM_TASKS_PER_NODE", e.worldSize, 1, 1 << 20);
    master(e.worldSize > 1);
    e.restartCount = r.integerOr("SLURM_RESTART_COUNT", 0, 0, 1 << 20);
    checkConsistent(e, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE");
  } else if (r.has("OMPI_COMM_WORLD_RANK") || r.has("OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "openmpi";
    e.rank = r.integer("OMPI_COMM_WORLD_RANK", 0, 1 << 20, "set by mpirun");
    e.worldSize = r.integer("OMPI_COMM_WORLD_SIZE", 1, 1 << 20, "set by mpirun");
    e.localRank = r.integerOr("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, 1 << 20);
    e.localWorldSize = r.integerOr("OMPI_COMM_WORLD_LOCAL_SIZE", e.worldSize, 1, 1 << 20);
    // All ranks on one host: rank 0 is on localhost. Across hosts MASTER_ADDR must say where.
    master(e.worldSize > 1 && e.localWorldSize < e.worldSize);
    checkConsistent(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE");
  }
  return e;
}

}  // namespace exprun
