// Purpose: a run's provenance (see Provenance.h).
#include "runner/train/Provenance.h"

#include <unistd.h>

#include <ctime>
#include <thread>

#include "runner/Version.h"
#include "runner/metrics/Hardware.h"
#include "runner/util/Compat.h"

namespace exprun {
std::string isoNow() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

Provenance Provenance::ofThisRun() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  Provenance p;
  p.add("exprun_version", EXPRUN_VERSION);
  p.add("git_commit", EXPRUN_GIT_COMMIT);
  p.add("libtorch_version", compat::torchVersion());
  p.add("compiler", std::string("g++ ") + __VERSION__);
  p.add("host", host);
  const std::string cpu = thisCpu().model;
  p.add("cpu_model", cpu.empty() ? std::string("unknown") : cpu);
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
