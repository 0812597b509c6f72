// Purpose: rendezvous environment parsing for torchrun / exprun launch, Slurm and OpenMPI.
#include <map>

#include "runner/dist/DistEnv.h"

#include "tests/TestUtil.h"

using namespace exprun;

namespace {
DistEnv parse(std::map<std::string, std::string> vars) {
  return parseDistEnv([vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST_SUITE("distenv") {
  TEST_CASE("no variables: one process") {
    DistEnv e = parse({});
    CHECK(e.worldSize == 1);
    CHECK_FALSE(e.distributed());
    CHECK(e.launcher == "none");
  }

  TEST_CASE("torchrun variables") {
    DistEnv e = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29400"}, {"TORCHELASTIC_RESTART_COUNT", "2"},
                       {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
    CHECK(e.launcher == "torchrun");
    CHECK(e.rank == 3);
    CHECK(e.worldSize == 4);
    CHECK(e.localRank == 1);
    CHECK(e.localWorldSize == 2);
    CHECK(e.masterAddr == "10.0.0.1");
    CHECK(e.masterPort == 29400);
    CHECK(e.restartCount == 2);
    CHECK(e.useAgentStore);
    CHECK(parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"EXPRUN_LAUNCHER", "x"}})
              .launcher == "exprun-launch");
  }

  TEST_CASE("Slurm variables with MASTER_ADDR/PORT from the batch script") {
    DistEnv e = parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                       {"SLURM_NTASKS_PER_NODE", "4(x2)"}, {"MASTER_ADDR", "node01"}, {"MASTER_PORT", "12345"}});
    CHECK(e.launcher == "slurm");
    CHECK(e.rank == 5);
    CHECK(e.worldSize == 8);
    CHECK(e.localRank == 1);
    CHECK(e.localWorldSize == 4);
    CHECK(e.masterAddr == "node01");
    CHECK_THROWS_CONTAINING(DistError, parse({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "2"}}), "MASTER_ADDR is not set");
    CHECK(parse({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).worldSize == 1);  // a plain one-task job
    CHECK(parse({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "6"}, {"SLURM_TASKS_PER_NODE", "3(x2)"}, {"MASTER_ADDR", "a"},
                 {"MASTER_PORT", "2"}})
              .localWorldSize == 3);
  }

  TEST_CASE("OpenMPI variables") {
    DistEnv e = parse({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
    CHECK(e.launcher == "openmpi");
    CHECK(e.rank == 1);
    CHECK(e.masterAddr == "127.0.0.1");  // one host: localhost
    CHECK_THROWS_CONTAINING(DistError,
                            parse({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                   {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                            "MASTER_ADDR");
  }

  TEST_CASE("inconsistent or malformed values name the variable") {
    CHECK_THROWS_CONTAINING(DistError, parse({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}}),
                            "RANK=2 is not below WORLD_SIZE=2");
    CHECK_THROWS_CONTAINING(DistError, parse({{"RANK", "0"}}), "WORLD_SIZE is not set");
    CHECK_THROWS_CONTAINING(DistError, parse({{"RANK", "x"}, {"WORLD_SIZE", "2"}}), "RANK='x' is not a non-negative integer");
    CHECK_THROWS_CONTAINING(DistError,
                            parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "70000"}}),
                            "MASTER_PORT=70000 is out of range");
    CHECK_THROWS_CONTAINING(DistError, parse({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "5"}}), "MASTER_ADDR is not set");
    CHECK_THROWS_CONTAINING(DistError,
                            parse({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"},
                                   {"MASTER_ADDR", "h"}, {"MASTER_PORT", "5"}}),
                            "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
  }
}
