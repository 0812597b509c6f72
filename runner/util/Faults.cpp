// Purpose: fault injection (see Faults.h).
#include "runner/util/Faults.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "runner/util/Log.h"

namespace exprun {
namespace {

struct Fault {
  std::string point;
  std::int64_t n = 0;
  int rank = -1;
  int error = 0;  // 0: kill; else the errno the call fails with
  bool resumed = false;  // armed in resumed runs too
  bool set = false;
};
std::atomic<bool> gDisarmed{false};
std::mutex gFaultMu;
std::map<std::string, std::int64_t> gFaultCounts;

const Fault& fault() {
  static const Fault f = [] {
    Fault r;
    const char* v = std::getenv("EXPRUN_FAULT");
    if (!v || !*v) return r;
    std::string s = v;
    const auto at = s.find('@');
    if (at == std::string::npos) return r;
    r.point = s.substr(0, at);
    std::size_t pos = at + 1;
    const auto colon = s.find(':', pos);
    r.n = std::atoll(s.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos).c_str());
    for (pos = colon; pos != std::string::npos;) {
      const auto next = s.find(':', pos + 1);
      const std::string part = s.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      if (part.rfind("rank", 0) == 0) r.rank = std::atoi(part.c_str() + 4);
      if (part == "ENOSPC") r.error = ENOSPC;
      if (part == "EIO") r.error = EIO;
      if (part == "EDQUOT") r.error = EDQUOT;
      if (part == "resumed") r.resumed = true;
      if (part.rfind("rank", 0) != 0 && part != "ENOSPC" && part != "EIO" && part != "EDQUOT" && part != "resumed")
        log::warn("EXPRUN_FAULT: ignoring '" + part + "' (expected rankR, ENOSPC, EIO, EDQUOT or resumed)");
      pos = next;
    }
    r.set = true;
    return r;
  }();
  return f;
}

std::int64_t countOccurrence(const char* point) {
  std::lock_guard<std::mutex> lock(gFaultMu);
  return ++gFaultCounts[point];
}

}  // namespace

void disarmFaults() { gDisarmed = !fault().resumed; }

void faultPoint(const char* point, std::int64_t n, int rank) {
  const Fault& f = fault();
  if (!f.set || f.error != 0 || gDisarmed || f.point != point) return;
  if (f.rank >= 0 && rank >= 0 && f.rank != rank) return;
  if (n < 0) n = countOccurrence(point);
  if (n != f.n) return;
  log::warn(std::string("EXPRUN_FAULT: killing this process at ") + point + "@" + std::to_string(n));
  std::raise(SIGKILL);
}

int faultErrno(const char* point) {
  const Fault& f = fault();
  if (!f.set || f.error == 0 || gDisarmed || f.point != point) return 0;
  if (countOccurrence(point) != f.n) return 0;
  log::warn(std::string("EXPRUN_FAULT: failing ") + point + "@" + std::to_string(f.n) + " with errno " +
            std::to_string(f.error));
  return f.error;
}

}  // namespace exprun
