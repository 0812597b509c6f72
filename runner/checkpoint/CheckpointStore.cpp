// Purpose: checksummed checkpoint files, atomic directory commit, discovery, spec diff, faults.
#include "runner/checkpoint/CheckpointStore.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "runner/results/ResultFile.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Log.h"

namespace exprun {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'E', 'X', 'P', 'R', 'C', 'K', 'P', '1'};
constexpr std::size_t kTrailer = 8 + 4 + 8;

std::int64_t stepOf(const std::string& name) {
  if (name.rfind("step-", 0) != 0 || name.size() < 6) return -1;
  if (name.size() > 5 + 15) return -1;  // not one of ours (and would overflow)
  for (std::size_t i = 5; i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  return std::stoll(name.substr(5));
}

}  // namespace

std::string stepDirName(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%09lld", static_cast<long long>(step));
  return buf;
}

std::string CheckpointStore::stagingDir(std::int64_t step) const { return dir_ + "/.staging-" + stepDirName(step); }

std::string CheckpointStore::prepareStaging(std::int64_t step) const {
  const std::string s = stagingDir(step);
  std::error_code ec;
  fs::remove_all(s, ec);
  fs::create_directories(s, ec);
  if (ec) throw CheckpointError("cannot create checkpoint folder '" + s + "': " + ec.message());
  return s;
}

std::string CheckpointStore::commit(std::int64_t step, int keep) const {
  const std::string staged = stagingDir(step), final = dir_ + "/" + stepDirName(step);
  fsyncDir(staged);
  faultPoint("save-staged", -1, 0);
  std::error_code ec;
  // The same step saved again (a resumed run, or a stop request right after a periodic save):
  // the old copy is moved aside, not deleted, until the new one is in place and named latest.
  const std::string aside = dir_ + "/.replaced-" + stepDirName(step);
  const bool replacing = fs::exists(final);
  if (replacing) {
    fs::remove_all(aside, ec);
    if (::rename(final.c_str(), aside.c_str()) != 0)
      throw CheckpointError("cannot rename '" + final + "' to '" + aside + "': " + std::strerror(errno));
  }
  const int injected = faultErrno("save-rename");
  if (injected != 0 || ::rename(staged.c_str(), final.c_str()) != 0) {
    const int err = injected != 0 ? injected : errno;
    if (replacing) ::rename(aside.c_str(), final.c_str());  // the replaced copy back in place
    throw CheckpointError("cannot rename '" + staged + "' to '" + final + "': " + std::strerror(err));
  }
  fsyncDir(dir_);
  faultPoint("save-renamed", -1, 0);
  writeFileAtomically(dir_ + "/latest", stepDirName(step) + "\n");
  if (keep > 0) {  // the new checkpoint plus the keep - 1 newest others
    std::vector<std::pair<std::int64_t, std::string>> others;
    for (const auto& e : fs::directory_iterator(dir_, ec))
      if (std::int64_t s = stepOf(e.path().filename().string()); s >= 0 && s != step) others.emplace_back(s, e.path().string());
    std::sort(others.rbegin(), others.rend());
    for (std::size_t i = static_cast<std::size_t>(keep - 1); i < others.size(); ++i) fs::remove_all(others[i].second, ec);
  }
  // Staging folders left by killed runs, and replaced copies.
  for (const auto& e : fs::directory_iterator(dir_, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind(".staging-", 0) == 0 || n.rfind(".replaced-", 0) == 0) fs::remove_all(e.path(), ec);
  }
  return final;
}

std::vector<std::string> CheckpointStore::candidates() const {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::is_directory(dir_, ec)) return out;
  std::string latest;
  {
    std::ifstream in(dir_ + "/latest");
    std::getline(in, latest);
  }
  if (!latest.empty() && fs::is_directory(dir_ + "/" + latest)) out.push_back(dir_ + "/" + latest);
  std::vector<std::pair<std::int64_t, std::string>> all;
  for (const auto& e : fs::directory_iterator(dir_, ec))
    if (std::int64_t s = stepOf(e.path().filename().string()); s >= 0 && e.path().filename().string() != latest)
      all.emplace_back(s, e.path().string());
  std::sort(all.rbegin(), all.rend());
  for (auto& a : all) out.push_back(a.second);
  return out;
}

void CheckpointStore::writeFile(const std::string& path, const std::string& content) {
  char trailer[kTrailer];
  const std::uint32_t crc =
      static_cast<std::uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(content.data()), content.size()));
  const std::uint64_t len = content.size();
  std::memcpy(trailer, kMagic, 8);
  std::memcpy(trailer + 8, &crc, 4);
  std::memcpy(trailer + 12, &len, 8);
  const bool state = path.size() >= 9 && path.compare(path.size() - 9, 9, "state.bin") == 0;
  try {
    writeSynced(path, content + std::string(trailer, kTrailer), FileFaults{"save-write", "save-fsync"},
                state ? std::function<void()>([] { faultPoint("save-partial", -1, 0); }) : nullptr);
  } catch (const FileError& e) {
    throw CheckpointError(e.what());
  }
}

std::string CheckpointStore::readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": missing");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  if (all.size() < kTrailer || std::memcmp(all.data() + all.size() - kTrailer, kMagic, 8) != 0)
    throw CheckpointError(path + ": truncated or not a checkpoint file (no trailer)");
  std::uint32_t crc;
  std::uint64_t len;
  std::memcpy(&crc, all.data() + all.size() - kTrailer + 8, 4);
  std::memcpy(&len, all.data() + all.size() - kTrailer + 12, 8);
  if (len != all.size() - kTrailer)
    throw CheckpointError(path + ": truncated (" + std::to_string(all.size() - kTrailer) + " of " + std::to_string(len) + " bytes)");
  all.resize(len);
  const std::uint32_t got =
      static_cast<std::uint32_t>(crc32_z(0L, reinterpret_cast<const Bytef*>(all.data()), all.size()));
  if (got != crc) throw CheckpointError(path + ": corrupt (checksum mismatch)");
  return all;
}

std::vector<std::string> jsonDifferences(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix) {
  std::vector<std::string> out;
  if (a.is_object() && b.is_object()) {
    std::map<std::string, int> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys[it.key()] |= 1;
    for (auto it = b.begin(); it != b.end(); ++it) keys[it.key()] |= 2;
    for (const auto& [k, where] : keys) {
      const std::string path = prefix.empty() ? k : prefix + "." + k;
      if (where != 3) {
        out.push_back(path + " (" + (where == 1 ? "only in the checkpoint" : "only in the spec") + ")");
        continue;
      }
      auto sub = jsonDifferences(a[k], b[k], path);
      out.insert(out.end(), sub.begin(), sub.end());
    }
  } else if (a != b) {
    out.push_back(prefix + ": checkpoint " + a.dump() + ", spec " + b.dump());
  }
  return out;
}


}  // namespace exprun
