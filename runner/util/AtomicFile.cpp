// Purpose: synced and atomic file writes (see AtomicFile.h).
#include "runner/util/AtomicFile.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runner/util/Faults.h"

namespace exprun {
namespace {

// write() of all `n` bytes, retried on EINTR; the fault point answers an injected errno instead.
void writeAll(int fd, const char* p, std::size_t n, const std::string& path, const char* fault) {
  while (n > 0) {
    ssize_t w;
    if (const int injected = fault ? faultErrno(fault) : 0) {
      errno = injected;
      w = -1;
    } else {
      w = ::write(fd, p, n);
    }
    if (w < 0) {
      if (errno == EINTR) continue;
      throw FileError("cannot write '" + path + "': " + std::strerror(errno));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

void writeSynced(const std::string& path, const std::string& bytes, const FileFaults& faults,
                 const std::function<void()>& halfway) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw FileError("cannot write '" + path + "': " + std::strerror(errno));
  try {
    const std::size_t first = halfway ? bytes.size() / 2 : bytes.size();
    writeAll(fd, bytes.data(), first, path, faults.write);
    if (halfway) {
      halfway();
      writeAll(fd, bytes.data() + first, bytes.size() - first, path, faults.write);
    }
    const int injected = faults.fsync ? faultErrno(faults.fsync) : 0;
    if (injected != 0 || ::fsync(fd) != 0)
      throw FileError("cannot flush '" + path + "': " + std::strerror(injected != 0 ? injected : errno));
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) throw FileError("cannot flush '" + path + "': " + std::strerror(errno));
}

void writeFileAtomically(const std::string& path, const std::string& bytes, const FileFaults& faults) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  if (target.has_parent_path()) {
    std::error_code ec;
    fs::create_directories(target.parent_path(), ec);
    if (ec) throw FileError("cannot create directory '" + target.parent_path().string() + "': " + ec.message());
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  try {
    writeSynced(tmp, bytes, faults);
  } catch (const FileError&) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw FileError("cannot rename '" + tmp + "' to '" + path + "': " + std::strerror(err));
  }
  if (target.has_parent_path()) fsyncDir(target.parent_path().string());
}

void fsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace exprun
