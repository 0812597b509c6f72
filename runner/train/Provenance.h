// Purpose: the provenance of a run — one ordered key/value list (exprun version and commit,
// LibTorch, compiler, host, CPU, cores, threads, device, world size, start time, and what the
// set-up derived: parameters, global batch, scaled lr, steps, comm, precision, ...) that feeds both
// the start-up table on rank 0 and the result file's `provenance`.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace exprun {

class Provenance {
 public:
  // The machine and build: version, commit, LibTorch, compiler, host, CPU model, cores, start time.
  static Provenance ofThisRun();
  // Appends (or replaces) `key`.
  void add(const std::string& key, nlohmann::json value);
  nlohmann::json toJson() const;
  // ("run", key, value) rows for the start-up table; values that are objects (a memory plan) are
  // left to their own log lines.
  std::vector<std::array<std::string, 3>> rows() const;

 private:
  std::vector<std::pair<std::string, nlohmann::json>> items_;
};

// Now, in UTC, ISO 8601 ("2026-12-03T14:22:17Z").
std::string isoNow();

}  // namespace exprun
