// Purpose: TensorBoard event files written by hand (no protobuf or TensorFlow): TFRecord framing
// (length, masked CRC-32C of the length, an Event proto, masked CRC-32C of the proto) around Event
// protos with a wall time, a step and a Summary of scalar values (tag, simple_value), after the
// first event's file_version "brain.Event:2". The few protobuf fields are encoded here directly.
// Records are buffered and appended at flush() (AppendFile); a resumed run truncates the file to the
// size its checkpoint recorded, so curves continue without duplicate steps. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/live/AppendFile.h"

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

}  // namespace exprun
