// Purpose: the one folder of exprun's per-host caches (the measured peak FLOP/s, imagefolder's
// file lists): $EXPRUN_CACHE_DIR, else $XDG_CACHE_HOME/exprun, else ~/.cache/exprun. Tests point
// EXPRUN_CACHE_DIR at a folder of their own, so they never read or write the user's. Torch-free.
#pragma once

#include <string>

namespace exprun {

// The cache folder, or its subfolder `sub`; "" when neither variable nor HOME is set.
std::string cacheDir(const std::string& sub = "");

}  // namespace exprun
