// Purpose: the on-disk side of training checkpoints, torch-free: checksummed files, the atomic
// commit of a checkpoint directory (stage → fsync → rename → fsync → "latest" pointer → prune),
// finding the newest usable checkpoint, the spec comparison on resume.
// Rule: a checkpoint is renamed into place only when every rank has written its part, so a process
// killed at any moment leaves the previous checkpoint usable.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/util/Faults.h"

namespace exprun {

class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Layout: <dir>/step-000000123/{meta.json, state.bin, rank-00000.bin, ...} and <dir>/latest (the
// name of the newest committed step directory); a checkpoint is staged in
// <dir>/.staging-step-000000123. Every file ends with a 20-byte trailer (magic, CRC-32, length), so
// a truncated or corrupt file is detected when read.
class CheckpointStore {
 public:
  explicit CheckpointStore(std::string dir) : dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

  // The (emptied, created) staging folder of the checkpoint at `step`: rank 0 calls it, then all
  // ranks write their files into stagingDir(step) after a barrier.
  std::string prepareStaging(std::int64_t step) const;
  std::string stagingDir(std::int64_t step) const;
  // Rank 0, after every rank wrote its files: makes the staged checkpoint the latest and keeps
  // only the `keep` newest (0: all).
  std::string commit(std::int64_t step, int keep) const;
  // Committed checkpoints, most preferred first: the one "latest" names, then the others by
  // step, newest first.
  std::vector<std::string> candidates() const;

  // Checksummed files: content + trailer, fsynced.
  static void writeFile(const std::string& path, const std::string& content);
  // Throws CheckpointError naming the file when it is missing, truncated or corrupt.
  static std::string readFile(const std::string& path);

 private:
  std::string dir_;
};

std::string stepDirName(std::int64_t step);

// Key paths ("optimizer.lr") whose values differ between two JSON objects, with both values.
std::vector<std::string> jsonDifferences(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix = "");

// Fault injection (faultPoint, faultErrno, disarmFaults): runner/util/Faults.h.

}  // namespace exprun
