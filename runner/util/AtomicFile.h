// Purpose: the one way exprun writes a file that must survive a crash or a full disk whole or not
// at all: the bytes go to a temporary file beside the target (write, then fsync), which is renamed
// over the target, and the folder is fsynced so that the rename itself is durable. A reader sees
// the old file or the new one, never a part. writeSynced is the first half (write + fsync) for
// files that become visible another way (a checkpoint's files, staged in a folder that is renamed
// into place as a whole). Failures throw FileError naming the file and the system's reason.
// Torch-free.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace exprun {

class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The fault-injection points (runner/util/Faults.h) of a file's write() and fsync() calls, for
// the full-disk tests; nullptr: none.
struct FileFaults {
  const char* write = "file-write";
  const char* fsync = nullptr;
};

// Writes `bytes` to `path` (created or truncated) in one write() and fsyncs it. With `halfway`, the
// bytes go in two write()s and `halfway` runs between them (the crash tests' kill point inside a file).
void writeSynced(const std::string& path, const std::string& bytes, const FileFaults& faults = {},
                 const std::function<void()>& halfway = nullptr);

// Replaces `path` with `bytes` atomically (its folder is created when missing).
void writeFileAtomically(const std::string& path, const std::string& bytes, const FileFaults& faults = {});

// fsync of a folder: makes the creation, removal or renaming of its entries durable. Best effort.
void fsyncDir(const std::string& dir);

}  // namespace exprun
