// Purpose: a run's provenance (see Provenance.h).
#include "runner/train/Provenance.h"

#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "runner/Compat.h"
#include "runner/Version.h"

namespace exprun {
namespace {

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "unknown";
}

std::string isoNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

Provenance Provenance::ofThisRun() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  Provenance p;
  p.add("exprun_version", EXPRUN_VERSION);
  p.add("git_commit", EXPRUN_GIT_COMMIT);
  p.add("libtorch_version", compat::torchVersion());
  p.add("compiler", std::string("g++ ") + __VERSION__);
  p.add("host", host);
  p.add("cpu_model", cpuModel());
  p.add("cores", std::thread::hardware_concurrency());
  p.add("start_time", isoNow());
  return p;
}

void Provenance::add(const std::string& key, nlohmann::json value) {
  for (auto& [k, v] : items_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(key, std::move(value));
}

nlohmann::json Provenance::toJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : items_) j[k] = v;
  return j;
}

std::vector<std::array<std::string, 3>> Provenance::rows() const {
  std::vector<std::array<std::string, 3>> r;
  for (const auto& [k, v] : items_)
    if (!v.is_object()) r.push_back({"run", k, v.is_string() ? v.get<std::string>() : v.dump()});
  return r;
}

}  // namespace exprun
