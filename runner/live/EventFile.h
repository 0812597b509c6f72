// Purpose: TensorBoard event files written by hand (no protobuf or TensorFlow): TFRecord framing
// (length, masked CRC-32C of the length, an Event proto, masked CRC-32C of the proto) around Event
// protos with a wall time, a step and a Summary of scalar values (tag, simple_value), after the
// first event's file_version "brain.Event:2". The few protobuf fields are encoded here directly.
// Records are buffered and appended at flush(); a resumed run truncates the file to the size its
// checkpoint recorded, so curves continue without duplicate steps. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exprun {

// CRC-32C (Castagnoli), as TFRecord uses it, and TFRecord's masking of it.
std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc = 0);
std::uint32_t maskedCrc32c(const void* data, std::size_t size);

// One TFRecord record around `payload`.
std::string tfRecord(const std::string& payload);
// An Event proto with scalar values; an empty `values` with a non-empty `fileVersion` gives the
// file's first event.
struct Scalar {
  std::string tag;
  float value = 0;
};
std::string eventProto(double wallTime, std::int64_t step, const std::vector<Scalar>& values,
                       const std::string& fileVersion = "");

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

class EventFile {
 public:
  // `path` (its folder is created). keepBytes < 0: a new file (an old one is replaced); otherwise
  // the file is cut to its first keepBytes (what a checkpoint recorded) and appended to.
  EventFile(const std::string& path, std::int64_t keepBytes);
  void scalars(std::int64_t step, const std::vector<Scalar>& values, double wallTime) {
    file_.add(tfRecord(eventProto(wallTime, step, values)));
  }
  void flush() { file_.flush(); }
  std::int64_t bytes() const { return file_.bytes(); }

 private:
  AppendFile file_;
};

// Cuts `path` to its first `bytes` (or leaves it, when it is shorter) and returns its size
// afterwards; with bytes < 0 or no file, starts it empty (returns 0). Throws naming the file.
std::int64_t cutFile(const std::string& path, std::int64_t bytes);

}  // namespace exprun
