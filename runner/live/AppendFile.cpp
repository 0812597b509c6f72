// Purpose: append-only files cut back on resume (see AppendFile.h).
#include "runner/live/AppendFile.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "runner/util/AtomicFile.h"

namespace exprun {
namespace {

void appendToFile(const std::string& path, const std::string& bytes) {
  if (bytes.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw std::runtime_error("cannot write '" + path + "': " + std::strerror(err));
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) throw std::runtime_error("cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace

std::int64_t cutFile(const std::string& path, std::int64_t bytes) {
  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) {
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) throw std::runtime_error("cannot create directory '" + p.parent_path().string() + "': " + ec.message());
  }
  struct stat st {};
  if (bytes < 0 || ::stat(path.c_str(), &st) != 0) {
    writeFileAtomically(path, "");
    return 0;
  }
  if (st.st_size <= bytes) return st.st_size;
  // Cut back through the one atomic writer (a copy of the first `bytes` bytes renamed over the
  // file, both fsynced): a crash leaves the old file or the cut one, never a half-cut one.
  std::string kept(static_cast<std::size_t>(bytes), '\0');
  {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw std::runtime_error("cannot read '" + path + "': " + std::strerror(errno));
    std::size_t got = 0;
    while (got < kept.size()) {
      const ssize_t n = ::read(fd, kept.data() + got, kept.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        throw std::runtime_error("cannot read '" + path + "' (its first " + std::to_string(bytes) + " bytes)");
      }
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
  }
  writeFileAtomically(path, kept);
  return bytes;
}

AppendFile::AppendFile(std::string path, std::int64_t keepBytes, const std::string& header) : path_(std::move(path)) {
  bytes_ = cutFile(path_, keepBytes);
  if (bytes_ == 0) pending_ = header;
}

void AppendFile::flush() {
  appendToFile(path_, pending_);
  bytes_ += static_cast<std::int64_t>(pending_.size());
  pending_.clear();
}

}  // namespace exprun
