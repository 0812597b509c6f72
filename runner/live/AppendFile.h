// Purpose: files the live outputs append to (the per-step CSV, the TensorBoard event file), in whole
// flushes; a resumed run first cuts them back to the sizes its checkpoint recorded, so that they
// continue without a step twice. Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace exprun {

// Appends to a file in whole flushes (the per-step CSV, the event file); a resumed run cuts it back
// to the size its checkpoint recorded. `header` starts a new file.
class AppendFile {
 public:
  AppendFile(std::string path, std::int64_t keepBytes, const std::string& header);
  void add(const std::string& text) { pending_ += text; }
  // Appends what is buffered; throws std::runtime_error naming the file on failure.
  void flush();
  // Bytes on disk after the last flush.
  std::int64_t bytes() const { return bytes_; }

 private:
  std::string path_;
  std::string pending_;
  std::int64_t bytes_ = 0;
};

// Cuts `path` to its first `bytes` (or leaves it, when it is shorter) and returns its size
// afterwards; with bytes < 0 or no file, starts it empty (returns 0). Throws naming the file.
std::int64_t cutFile(const std::string& path, std::int64_t bytes);

}  // namespace exprun
