// Purpose: one run per checkpoint folder (FolderLock): a second run is refused naming the first; a
// lock left by a process that is gone, or whose pid now belongs to a later process, is taken over;
// another host's lock is refused unless forced; the lock goes with its owner.
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runner/checkpoint/FolderLock.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {
std::string host() {
  char h[256] = {};
  ::gethostname(h, sizeof h - 1);
  return h;
}
long deadPid() {  // a child that has exited and been reaped
  const pid_t p = ::fork();
  if (p == 0) ::_exit(0);
  ::waitpid(p, nullptr, 0);
  return static_cast<long>(p);
}
}  // namespace

TEST_SUITE("checkpoint_lock") {
  TEST_CASE("a second run is refused naming the first; the lock goes with its owner") {
    TempDir dir;
    const std::string folder = dir.file("run.ckpt");
    {
      FolderLock first(folder, false);
      const auto j = nlohmann::json::parse(readText(first.path()));
      CHECK(j["pid"] == static_cast<long>(::getpid()));
      CHECK(j["host"] == host());
      CHECK_THROWS_CONTAINING(CheckpointError, FolderLock(folder, false), "is in use by another run",
                              "pid " + std::to_string(::getpid()), folder + "/lock");
    }
    CHECK(!std::filesystem::exists(folder + "/lock"));
    CHECK_NOTHROW(FolderLock(folder, false));
  }

  TEST_CASE("stale locks: the process is gone, or its pid belongs to a later process") {
    TempDir dir;
    const std::string folder = dir.file("run.ckpt");
    std::filesystem::create_directories(folder);
    writeText(folder + "/lock", nlohmann::json{{"host", host()}, {"pid", deadPid()}, {"process_start", "1"},
                                               {"started", "2026-01-01T00:00:00Z"}}
                                    .dump());
    {
      FolderLock taken(folder, false);
      CHECK(nlohmann::json::parse(readText(taken.path()))["pid"] == static_cast<long>(::getpid()));
    }
    // Our own pid, but recorded with another process start: a pid reused since.
    writeText(folder + "/lock", nlohmann::json{{"host", host()}, {"pid", static_cast<long>(::getpid())},
                                               {"process_start", "1"}, {"started", "2026-01-01T00:00:00Z"}}
                                    .dump());
    CHECK_NOTHROW(FolderLock(folder, false));
  }

  TEST_CASE("another host's lock cannot be checked: refused unless forced") {
    TempDir dir;
    const std::string folder = dir.file("run.ckpt");
    std::filesystem::create_directories(folder);
    writeText(folder + "/lock", nlohmann::json{{"host", "elsewhere-" + host()}, {"pid", 1}, {"process_start", "1"},
                                               {"started", "2026-01-01T00:00:00Z"}}
                                    .dump());
    CHECK_THROWS_CONTAINING(CheckpointError, FolderLock(folder, false), "host elsewhere-", "on another host",
                            "--force");
    FolderLock forced(folder, true);
    CHECK(nlohmann::json::parse(readText(forced.path()))["host"] == host());
  }
}
