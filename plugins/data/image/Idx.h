// Purpose: reader of IDX files (the MNIST family's format), plain or gzip-compressed.
// Every problem (missing, unreadable, truncated, corrupt, wrong type or shape) is an IdxError
// whose message names the file.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace exprun {

class IdxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;  // unsigned bytes, row-major
};

// Reads an unsigned-byte IDX file with `expectedRank` dimensions.
IdxArray readIdx(const std::string& path, int expectedRank);

}  // namespace exprun
