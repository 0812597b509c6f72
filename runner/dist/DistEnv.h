// Purpose: where this process sits in a data-parallel job, read from the environment that a
// launcher sets — torchrun / `exprun launch` (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and
// MASTER_PORT exported by the batch script) or OpenMPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK).
// No variables: one process. Inconsistent values are a DistError naming the variable.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace exprun {

class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DistEnv {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int localWorldSize = 1;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 29500;
  std::string launcher = "none";  // "torchrun", "exprun-launch", "slurm", "openmpi", "none"
  bool useAgentStore = false;     // torchrun's agent already hosts the TCPStore at MASTER_PORT
  int restartCount = 0;           // TORCHELASTIC_RESTART_COUNT
  bool distributed() const { return worldSize > 1; }
};

using GetEnv = std::function<const char*(const char*)>;

// Parses the environment (std::getenv by default). Throws DistError.
DistEnv parseDistEnv(const GetEnv& getenv = nullptr);

}  // namespace exprun
