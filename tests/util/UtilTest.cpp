// Purpose: what every room uses (runner/util/): the atomic writer (never a partial file, its
// failures named), text for people (durations, GiB, memory sizes), the cache folder's precedence,
// checked JSON reading naming the field's path, and the process spawner's exit codes.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "runner/results/ResultFile.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/CacheDir.h"
#include "runner/util/Format.h"
#include "runner/util/JsonFields.h"
#include "runner/util/Spawn.h"
#include "tests/TestUtil.h"

using namespace exprun;
using exprun::test::readText;
using exprun::test::TempDir;
using exprun::test::writeText;

namespace {

// Sets an environment variable for a scope (restored, or unset, at its end).
struct EnvVar {
  std::string name, old;
  bool had;
  EnvVar(std::string n, const char* value) : name(std::move(n)), had(std::getenv(name.c_str()) != nullptr) {
    if (had) old = std::getenv(name.c_str());
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~EnvVar() {
    if (had)
      ::setenv(name.c_str(), old.c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_SUITE("util") {
  TEST_CASE("durations and sizes are formatted for people") {
    CHECK(formatDuration(462) == "7 min 42 s");
    CHECK(formatDuration(38.54) == "38.5 s");
    CHECK(formatDuration(0) == "0.0 s");
    CHECK(formatDuration(59.97) == "1 min 00 s");
    CHECK(formatDuration(3720) == "1 h 02 min");
    CHECK(formatDuration(3599.7) == "1 h 00 min");
    CHECK(formatDuration(7 * 3600 + 59 * 60 + 40) == "8 h 00 min");
    CHECK(formatGiB(std::int64_t{3} << 29) == "1.5");
    CHECK(formatGiB(796049408) == "0.7");
  }


  TEST_CASE("memory sizes") {
    CHECK(parseBytes("20GiB") == 20LL * 1024 * 1024 * 1024);
    CHECK(parseBytes("512 MiB") == 512LL * 1024 * 1024);
    CHECK(parseBytes("1.5GB") == 1500000000LL);
    CHECK(parseBytes("100") == 100);
    CHECK(parseBytes("2kib") == 2048);
    CHECK_THROWS_CONTAINING(std::invalid_argument, parseBytes("lots"), "'lots' is not a memory size");
  }


  TEST_CASE("the atomic writer never leaves a partial file behind") {
    TempDir dir;
    writeText(dir.file("r.json"), "old");
    ResultFile r;
    r.name = "x";
    r.write(dir.file("r.json"));
    CHECK(nlohmann::json::parse(readText(dir.file("r.json")))["name"] == "x");
    int files = 0;
    for (auto& e : std::filesystem::directory_iterator(dir.path)) files += e.is_regular_file() ? 1 : 0;
    CHECK(files == 1);  // no temp file left
    CHECK_THROWS_AS(r.write("/proc/forbidden/r.json"), std::runtime_error);
  }
  TEST_CASE("the atomic writer's failures name the file and the reason; it makes the folder") {
    TempDir dir;
    writeFileAtomically(dir.file("a/b/c.txt"), "x");
    CHECK(readText(dir.file("a/b/c.txt")) == "x");
    CHECK_THROWS_CONTAINING(FileError, writeFileAtomically("/proc/forbidden/r.json", "x"), "/proc/forbidden");
    writeSynced(dir.file("s.bin"), "abcd");
    CHECK(readText(dir.file("s.bin")) == "abcd");
    int halfway = 0;
    writeSynced(dir.file("h.bin"), "abcd", FileFaults{}, [&] { halfway = readText(dir.file("h.bin")).size(); });
    CHECK(halfway == 2);  // the kill point of the crash tests sits after the first half
  }

  TEST_CASE("the cache folder: EXPRUN_CACHE_DIR, else XDG_CACHE_HOME/exprun, else ~/.cache/exprun") {
    EnvVar home("HOME", "/home/u");
    {
      EnvVar ours("EXPRUN_CACHE_DIR", "/c"), xdg("XDG_CACHE_HOME", "/x");
      CHECK(cacheDir() == "/c");
      CHECK(cacheDir("imagefolder") == "/c/imagefolder");
    }
    EnvVar ours("EXPRUN_CACHE_DIR", nullptr);
    {
      EnvVar xdg("XDG_CACHE_HOME", "/x");
      CHECK(cacheDir("imagefolder") == "/x/exprun/imagefolder");
    }
    EnvVar xdg("XDG_CACHE_HOME", nullptr);
    CHECK(cacheDir() == "/home/u/.cache/exprun");
  }

  TEST_CASE("checked JSON: a missing or mistyped field is named by its path; null reads as NaN") {
    const nlohmann::json j = nlohmann::json::parse(R"({"a": {"n": null, "s": "x", "i": 2.0, "l": [{"k": 1}, 3]}})");
    const JsonFields top(j, "");
    const JsonFields a = top.object("a");
    CHECK(std::isnan(a.number("n")));
    CHECK(a.integer("i") == 2);
    CHECK(a.numberOr("missing", 7.0) == 7.0);
    CHECK_THROWS_CONTAINING(JsonFieldError, a.number("s"), "a.s: expected a number, got string \"x\"");
    CHECK_THROWS_CONTAINING(JsonFieldError, a.text("gone"), "a.gone: missing required field");
    CHECK_THROWS_CONTAINING(JsonFieldError, a.objects("l", "an item", true), "a.l[1]: expected an item, got number 3");
    CHECK_THROWS_CONTAINING(JsonFieldError, JsonFields(nlohmann::json::array(), "", "a result object"),
                            "(top level): expected a result object");
  }

  TEST_CASE("a spawned process: its exit code, or 128 + the signal that ended it") {
    SpawnOptions o;
    o.who = "test";
    o.env = {{"EXPRUN_SPAWN_TEST", "41"}};
    CHECK(waitExitCode(spawn("/bin/sh", {"-c", "exit $((EXPRUN_SPAWN_TEST + 1))"}, o).pid) == 42);
    CHECK(waitExitCode(spawn("/bin/sh", {"-c", "kill -TERM $$"}, o).pid) == 128 + 15);
    CHECK(waitExitCode(spawn("/nonexistent/exprun", {}, o).pid) == 127);  // cannot execute
    o.capture = true;
    const Child c = spawn("/bin/sh", {"-c", "echo out; echo err >&2"}, o);
    CHECK(waitExitCode(c.pid) == 0);
    char buf[16] = {};
    CHECK(::read(c.outFd, buf, sizeof buf - 1) == 4);
    CHECK(std::string(buf) == "out\n");
    ::close(c.outFd);
    ::close(c.errFd);
  }
}
