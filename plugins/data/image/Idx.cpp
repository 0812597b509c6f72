// Purpose: IDX reading through zlib (which also reads uncompressed files transparently and checks
// the gzip CRC at the end of the stream, so a corrupted copy is detected, not silently used).
#include "plugins/data/image/Idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <sys/stat.h>

namespace exprun {

IdxArray readIdx(const std::string& path, int expectedRank) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw IdxError(path + ": cannot open: " + std::strerror(errno));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw IdxError(path + ": cannot open: " + std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> buf(1 << 20);
  while (true) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int code = 0;
      std::string msg = gzerror(f, &code);
      gzclose(f);
      throw IdxError(path + ": corrupt or truncated gzip data (" + msg + ")");
    }
    if (n == 0) break;
    bytes.insert(bytes.end(), buf.begin(), buf.begin() + n);
  }
  int code = 0;
  std::string msg = gzerror(f, &code);
  int closeCode = gzclose(f);
  if (code != Z_OK && code != Z_STREAM_END) throw IdxError(path + ": corrupt or truncated gzip data (" + msg + ")");
  if (closeCode != Z_OK) throw IdxError(path + ": corrupt or truncated gzip data (close failed, code " + std::to_string(closeCode) + ")");

  if (bytes.size() < 4) throw IdxError(path + ": not an IDX file (only " + std::to_string(bytes.size()) + " bytes)");
  if (bytes[0] != 0 || bytes[1] != 0)
    throw IdxError(path + ": not an IDX file (bad magic number)");
  if (bytes[2] != 0x08)
    throw IdxError(path + ": unsupported IDX element type 0x" + std::to_string(bytes[2]) + " (expected unsigned bytes, 0x08)");
  const int rank = bytes[3];
  if (rank != expectedRank)
    throw IdxError(path + ": IDX file has " + std::to_string(rank) + " dimensions, expected " + std::to_string(expectedRank));
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) throw IdxError(path + ": truncated IDX header");
  IdxArray out;
  size_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const std::uint8_t* p = &bytes[4 + 4 * i];
    std::int64_t d = (std::int64_t(p[0]) << 24) | (std::int64_t(p[1]) << 16) | (std::int64_t(p[2]) << 8) | p[3];
    if (d <= 0) throw IdxError(path + ": invalid dimension " + std::to_string(d));
    out.dims.push_back(d);
    count *= static_cast<size_t>(d);
  }
  if (bytes.size() - header != count)
    throw IdxError(path + ": truncated or oversized IDX data: header promises " + std::to_string(count) +
                   " bytes, file holds " + std::to_string(bytes.size() - header));
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

}  // namespace exprun
