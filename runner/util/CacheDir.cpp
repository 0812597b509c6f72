// Purpose: exprun's cache folder (see CacheDir.h).
#include "runner/util/CacheDir.h"

#include <cstdlib>

namespace exprun {

std::string cacheDir(const std::string& sub) {
  std::string dir;
  if (const char* d = std::getenv("EXPRUN_CACHE_DIR"); d && *d)
    dir = d;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    dir = std::string(x) + "/exprun";
  else if (const char* h = std::getenv("HOME"); h && *h)
    dir = std::string(h) + "/.cache/exprun";
  if (dir.empty() || sub.empty()) return dir;
  return dir + "/" + sub;
}

}  // namespace exprun
