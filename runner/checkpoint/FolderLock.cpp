// Purpose: the lock of a checkpoint folder (see FolderLock.h).
#include "runner/checkpoint/FolderLock.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runner/util/Log.h"

namespace exprun {

namespace fs = std::filesystem;

namespace {

std::string thisHost() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

// Field 22 of /proc/PID/stat: the process's start in clock ticks since boot ("" when gone).
std::string processStart(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  const auto close = stat.rfind(')');  // the command name may hold spaces
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i)
    if (i == 22) return field;
  return "";
}

// A file's whole content ("" when it cannot be read).
std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string describeHolder(const nlohmann::json& j) {
  return "host " + j.value("host", std::string("?")) + ", pid " + std::to_string(j.value("pid", -1L)) + ", started " +
         j.value("started", std::string("?"));
}

// What a lock file says of its holder. A lock of this host names a process that can be checked; an
// unreadable one is a run killed while writing it.
struct Holder {
  bool readable = false, alive = false, checkable = true;
  std::string who = "an unreadable lock";
};

Holder readHolder(const std::string& held) {
  const nlohmann::json j = nlohmann::json::parse(held, nullptr, false);
  Holder h;
  h.readable = j.is_object() && j.contains("pid") && j["pid"].is_number_integer();
  if (!h.readable) return h;
  const bool sameHost = j.value("host", std::string()) == thisHost();
  const long pid = j["pid"].get<long>();
  h.alive = sameHost && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) &&
            processStart(pid) == j.value("process_start", std::string());
  h.checkable = sameHost;
  h.who = describeHolder(j);
  return h;
}

std::string lockContent(long pid) {
  std::time_t now = std::time(nullptr);
  char started[32];
  std::strftime(started, sizeof started, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return nlohmann::json{{"host", thisHost()}, {"pid", pid}, {"process_start", processStart(pid)}, {"started", started}}
             .dump() +
         "\n";
}

}  // namespace

FolderLock::FolderLock(const std::string& dir, bool force) : path_((fs::path(dir) / "lock").string()) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError("cannot create checkpoint folder '" + dir + "': " + ec.message());
  const long pid = static_cast<long>(::getpid());
  content_ = lockContent(pid);
  const std::string tmp = path_ + ".tmp." + std::to_string(pid);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content_;
    if (!out.flush()) {
      ::unlink(tmp.c_str());
      throw CheckpointError("cannot write the lock file '" + tmp + "'");
    }
  }
  for (int attempt = 0;; ++attempt) {
    if (::link(tmp.c_str(), path_.c_str()) == 0) {  // atomic: fails if a lock is there
      ::unlink(tmp.c_str());
      return;
    }
    const int err = errno;
    if (err != EEXIST || attempt >= 3) {
      ::unlink(tmp.c_str());
      throw CheckpointError(err != EEXIST ? "cannot create the lock file '" + path_ + "': " + std::strerror(err)
                                          : "cannot take the lock of checkpoint folder '" + dir +
                                                "' (other runs keep taking it)");
    }
    const std::string held = contents(path_);
    const Holder h = readHolder(held);
    if (!force && (h.alive || !h.checkable)) {
      ::unlink(tmp.c_str());
      throw CheckpointError("checkpoint folder '" + dir + "' is in use by another run (" + h.who + "; lock file " +
                            path_ + ")" +
                            (h.alive ? ": stop it, or give this run another output.checkpoint.dir"
                                     : ": it is on another host; if that run is gone, delete the lock file or pass --force"));
    }
    log::warn("checkpoint folder '" + dir + "': taking over the lock of " + h.who +
              (h.alive || !h.checkable ? " (--force)" : h.readable ? " (that process is gone)" : ""));
    // Move the old lock aside under our own name, then check it is the one we read (another run
    // may have taken it over in between: then put it back, or leave it aside if that fails, and
    // try again).
    const std::string aside = path_ + ".stale." + std::to_string(pid);
    if (::rename(path_.c_str(), aside.c_str()) != 0) continue;
    if (contents(aside) != held) {
      if (::link(aside.c_str(), path_.c_str()) == 0) ::unlink(aside.c_str());
      continue;
    }
    ::unlink(aside.c_str());
  }
}

FolderLock::~FolderLock() {
  if (contents(path_) == content_) ::unlink(path_.c_str());  // still ours
}

}  // namespace exprun
