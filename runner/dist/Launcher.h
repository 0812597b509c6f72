// Purpose: `exprun launch` — a local launcher in the manner of torchrun: starts nproc_per_node
// workers (`exprun run ...`) with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT), prefixes
// each line of their output with "[rank R] ", forwards SIGINT/SIGTERM, and when one worker fails
// stops the others (SIGTERM, then SIGKILL after a grace period) and exits with that worker's code,
// naming its rank. With max_restarts > 0 a failed group is started again, up to that many times.
#pragma once

#include <string>
#include <vector>

namespace exprun {

struct LaunchArgs {
  int nprocPerNode = 1;
  int nnodes = 1;
  int nodeRank = 0;
  std::string masterAddr = "127.0.0.1";
  int masterPort = 0;  // 0: a free port (one node) or 29500 (several nodes)
  int maxRestarts = 0;
  double graceS = 10.0;          // SIGTERM → SIGKILL delay when stopping workers
  std::string exe;               // the worker executable (default: this one)
  std::vector<std::string> workerArgs;  // arguments after the executable, e.g. {"run", "spec.yaml"}
};

// Runs the workers; returns the launcher's exit code. Throws std::invalid_argument on bad args.
int launchWorkers(const LaunchArgs& args);

// A TCP port on 127.0.0.1 that was free a moment ago.
int findFreePort();

}  // namespace exprun
