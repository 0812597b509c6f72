// Purpose: one run per checkpoint folder. Torch-free.
#pragma once

#include <string>

#include "runner/checkpoint/CheckpointStore.h"

namespace exprun {

// One run per checkpoint folder: `<dir>/lock` names the run using it (host, pid, the process's
// start, the wall-clock start), created atomically (written aside, then hard-linked into place)
// and removed when the lock is destroyed. A second run is refused with CheckpointError naming the
// first. A lock whose process is gone (same host: no such pid, or the pid now belongs to a process
// started later) is taken over with a warning; a lock from another host cannot be checked and is
// refused unless `force` (--force), which takes any lock over.
class FolderLock {
 public:
  FolderLock(const std::string& dir, bool force);
  ~FolderLock();
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_, content_;
};

}  // namespace exprun
