// Purpose: TensorBoard event files (see EventFile.h).
#include "runner/live/EventFile.h"

#include <array>
#include <chrono>
#include <cstring>

namespace exprun {
namespace {

const std::array<std::uint32_t, 256>& crcTable() {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void putFixed32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void putFixed64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}
void putVarint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
// A length-delimited field (wire type 2).
void putBytes(std::string& out, int field, const std::string& bytes) {
  putVarint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  putVarint(out, bytes.size());
  out += bytes;
}

}  // namespace

std::uint32_t crc32c(const void* data, std::size_t size, std::uint32_t crc) {
  const auto& t = crcTable();
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (std::size_t i = 0; i < size; ++i) crc = t[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

std::uint32_t maskedCrc32c(const void* data, std::size_t size) {
  const std::uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfRecord(const std::string& payload) {
  std::string out, length;
  putFixed64(length, payload.size());
  out += length;
  putFixed32(out, maskedCrc32c(length.data(), length.size()));
  out += payload;
  putFixed32(out, maskedCrc32c(payload.data(), payload.size()));
  return out;
}

std::string eventProto(double wallTime, std::int64_t step, const std::vector<Scalar>& values,
                       const std::string& fileVersion) {
  std::string e;
  std::uint64_t bits;
  static_assert(sizeof bits == sizeof wallTime, "double is 64 bits");
  std::memcpy(&bits, &wallTime, sizeof bits);
  putVarint(e, (1 << 3) | 1);  // wall_time: double
  putFixed64(e, bits);
  putVarint(e, 2 << 3);  // step: int64
  putVarint(e, static_cast<std::uint64_t>(step));
  if (!fileVersion.empty()) putBytes(e, 3, fileVersion);
  if (!values.empty()) {
    std::string summary;
    for (const auto& v : values) {
      std::string value;
      putBytes(value, 1, v.tag);  // tag
      std::uint32_t f;
      std::memcpy(&f, &v.value, sizeof f);
      putVarint(value, (2 << 3) | 5);  // simple_value: float
      putFixed32(value, f);
      putBytes(summary, 1, value);  // Summary.value
    }
    putBytes(e, 5, summary);  // Event.summary
  }
  return e;
}

namespace {

std::string fileVersionRecord() {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return tfRecord(eventProto(now, 0, {}, "brain.Event:2"));
}

}  // namespace

// A new file starts with the file_version event.
EventFile::EventFile(const std::string& path, std::int64_t keepBytes) : file_(path, keepBytes, fileVersionRecord()) {}

}  // namespace exprun
