// Purpose: the host's CPU model name (/proc/cpuinfo's first "model name"), for the provenance and
// the peak-FLOP/s cache key; empty when the file does not say.
#pragma once

#include <fstream>
#include <string>

namespace exprun {

inline std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      return p == std::string::npos ? line : line.substr(p + 2);
    }
  return "";
}

}  // namespace exprun
