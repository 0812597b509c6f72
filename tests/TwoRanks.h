// Purpose: a real 2-rank Gloo process group inside the test process (two threads, each its own
// rank) for tests of collectives and comm hooks.
#pragma once

#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

#include "runner/dist/Dist.h"
#include "runner/dist/Launcher.h"

namespace exprun::test {

// Two process groups in one process would race in c10d's process-wide flight recorder (an
// unguarded std::map insert): it is turned off, at start-up, in a test binary that uses this
// header. Real runs have one group per process and keep it.
inline const int kFlightRecorderOff = (::setenv("TORCH_FR_BUFFER_SIZE", "0", 1), 0);

// Runs fn(rank, dist) on two ranks of a fresh Gloo group; rethrows the first failure.
inline void onTwoRanks(const std::function<void(int, Dist&)>& fn) {
  const int port = findFreePort();
  std::exception_ptr errors[2];
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        DistEnv env;
        env.rank = r;
        env.worldSize = 2;
        env.localRank = r;
        env.localWorldSize = 2;
        env.masterPort = port;
        env.launcher = "test";
        auto dist = Dist::join(env, "gloo", 60);
        fn(r, *dist);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace exprun::test
