// Purpose: ImageFolder scanning with an mtime-checked cache, and list files.
#include "plugins/data/image/ImageIndex.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runner/util/AtomicFile.h"
#include "runner/util/Log.h"

namespace exprun {

namespace {

struct Entry {
  std::string name;
  bool isDir = false;
};

// Entries of `dir` (following symbolic links, as os.walk(followlinks=True)), sorted by name.
std::vector<Entry> listDir(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) throw IndexError(dir + ": cannot open folder: " + std::strerror(errno));
  std::vector<Entry> out;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    struct stat st;
    if (stat((dir + "/" + n).c_str(), &st) != 0) continue;  // a dangling link
    out.push_back({n, S_ISDIR(st.st_mode)});
  }
  closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

std::int64_t mtimeNs(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

std::string canonical(const std::string& dir) {
  char buf[PATH_MAX];
  if (!realpath(dir.c_str(), buf)) throw IndexError(dir + ": cannot open folder: " + std::strerror(errno));
  return buf;
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Appends the image files under `dir` (relative paths prefixed with `rel`) and records every
// folder's modification time.
void walk(const std::string& root, const std::string& rel, std::vector<std::string>& files,
          std::vector<std::pair<std::string, std::int64_t>>& dirs) {
  const std::string dir = rel.empty() ? root : root + "/" + rel;
  dirs.emplace_back(rel, mtimeNs(dir));
  std::vector<std::string> subdirs;
  for (const Entry& e : listDir(dir)) {
    const std::string r = rel.empty() ? e.name : rel + "/" + e.name;
    if (e.isDir)
      subdirs.push_back(r);
    else if (hasImageExtension(e.name))
      files.push_back(r);
  }
  for (const auto& s : subdirs) walk(root, s, files, dirs);
}

constexpr const char* kCacheMagic = "exprun-imagefolder-index 1";

// The cached index, or false when it is absent or stale.
bool readCache(const std::string& cacheFile, const std::string& dir, ImageIndex& idx) {
  std::ifstream in(cacheFile);
  if (!in) return false;
  std::string line;
  if (!std::getline(in, line) || line != kCacheMagic) return false;
  if (!std::getline(in, line) || line != "dir\t" + dir) return false;
  ImageIndex out;
  std::vector<std::string> classDirs;
  while (std::getline(in, line)) {
    const auto t1 = line.find('\t');
    if (t1 == std::string::npos) return false;
    const std::string kind = line.substr(0, t1);
    if (kind == "folder") {  // folder <mtime> <relative path>
      const auto t2 = line.find('\t', t1 + 1);
      if (t2 == std::string::npos) return false;
      const std::string rel = line.substr(t2 + 1);
      if (std::to_string(mtimeNs(rel.empty() ? dir : dir + "/" + rel)) != line.substr(t1 + 1, t2 - t1 - 1)) return false;
      if (!rel.empty() && rel.find('/') == std::string::npos) classDirs.push_back(rel);
    } else if (kind == "class") {
      out.classes.push_back(line.substr(t1 + 1));
    } else if (kind == "file") {  // file <label> <relative path>
      const auto t2 = line.find('\t', t1 + 1);
      if (t2 == std::string::npos) return false;
      char* end = nullptr;
      const std::string num = line.substr(t1 + 1, t2 - t1 - 1);
      const long label = std::strtol(num.c_str(), &end, 10);
      if (num.empty() || *end != '\0' || label < 0 || label > 1000000) return false;  // a damaged cache: rescan
      out.labels.push_back(static_cast<std::int32_t>(label));
      out.paths.push_back(dir + "/" + line.substr(t2 + 1));
    } else {
      return false;
    }
  }
  // Classes added or removed change the root's mtime (checked above); this guards the cache itself.
  std::sort(classDirs.begin(), classDirs.end());
  if (classDirs != out.classes) return false;
  out.fromCache = true;
  idx = std::move(out);
  return true;
}

}  // namespace

bool hasImageExtension(const std::string& name) {
  static const char* kExt[] = {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* e : kExt) {
    const std::size_t n = std::strlen(e);
    if (lower.size() > n && lower.compare(lower.size() - n, n, e) == 0) return true;
  }
  return false;
}

std::vector<std::string> listClassFolders(const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) throw IndexError(dir + ": no such folder");
  if (!S_ISDIR(st.st_mode)) throw IndexError(dir + ": not a folder");
  std::vector<std::string> out;
  for (const Entry& e : listDir(dir))
    if (e.isDir) out.push_back(e.name);
  if (out.empty()) throw IndexError(dir + ": no class folders (expected " + dir + "/<class>/<image files>)");
  return out;
}

ImageIndex indexImageFolder(const std::string& dirIn, const std::string& cacheDir) {
  listClassFolders(dirIn);  // existence and at least one class, with a clear message
  const std::string dir = canonical(dirIn);
  std::string cacheFile;
  if (!cacheDir.empty()) {
    std::ostringstream name;
    name << cacheDir << "/imagefolder-" << std::hex << fnv1a(dir) << ".tsv";
    cacheFile = name.str();
    ImageIndex cached;
    if (readCache(cacheFile, dir, cached)) return cached;
  }
  ImageIndex idx;
  idx.classes = listClassFolders(dir);
  std::vector<std::pair<std::string, std::int64_t>> dirs{{"", mtimeNs(dir)}};
  std::vector<std::string> empty;
  std::vector<std::string> rels;
  for (std::size_t c = 0; c < idx.classes.size(); ++c) {
    std::vector<std::string> files;
    walk(dir, idx.classes[c], files, dirs);
    if (files.empty()) empty.push_back(idx.classes[c]);
    for (auto& f : files) {
      rels.push_back(f);
      idx.labels.push_back(static_cast<std::int32_t>(c));
    }
  }
  if (!empty.empty()) {
    std::string list;
    for (std::size_t i = 0; i < empty.size() && i < 5; ++i) list += (i ? ", " : "") + empty[i];
    if (empty.size() > 5) list += ", ... (" + std::to_string(empty.size()) + " in all)";
    throw IndexError(dir + ": class folder(s) without image files (.jpg .jpeg .png ...): " + list);
  }
  for (const auto& r : rels) idx.paths.push_back(dir + "/" + r);
  if (!cacheFile.empty()) {
    bool cacheable = true;
    std::ostringstream out;
    out << kCacheMagic << "\ndir\t" << dir << "\n";
    for (const auto& [rel, m] : dirs) out << "folder\t" << m << "\t" << rel << "\n";
    for (const auto& c : idx.classes) out << "class\t" << c << "\n";
    for (std::size_t i = 0; i < rels.size(); ++i) {
      if (rels[i].find('\n') != std::string::npos) cacheable = false;
      out << "file\t" << idx.labels[i] << "\t" << rels[i] << "\n";
    }
    if (cacheable) {
      try {
        std::error_code ec;
        std::filesystem::create_directories(cacheDir, ec);
        writeFileAtomically(cacheFile, out.str());
      } catch (const std::exception& e) {
        log::warn(std::string("imagefolder: cannot cache the file list: ") + e.what());
      }
    }
  }
  return idx;
}

ImageIndex readImageList(const std::string& listFile, const std::string& root) {
  std::ifstream in(listFile);
  if (!in) throw IndexError(listFile + ": cannot open list file: " + std::strerror(errno));
  ImageIndex idx;
  std::string line;
  std::int32_t maxLabel = -1;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    std::size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    if (start == line.size() || line[start] == '#') continue;
    const std::size_t sep = line.find_last_of(" \t");
    const std::string where = listFile + ":" + std::to_string(lineNo) + ": ";
    if (sep == std::string::npos || sep < start) throw IndexError(where + "expected 'path label'");
    std::string path = line.substr(start, sep - start);
    while (!path.empty() && std::isspace(static_cast<unsigned char>(path.back()))) path.pop_back();
    const std::string label = line.substr(sep + 1);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(label.c_str(), &end, 10);
    if (label.empty() || *end != '\0' || errno != 0 || v < 0 || v > 1000000)
      throw IndexError(where + "label '" + label + "' is not a non-negative integer");
    idx.paths.push_back(!path.empty() && path[0] == '/' ? path : root + "/" + path);
    idx.labels.push_back(static_cast<std::int32_t>(v));
    maxLabel = std::max(maxLabel, static_cast<std::int32_t>(v));
  }
  if (idx.paths.empty()) throw IndexError(listFile + ": no samples in the list file");
  for (std::int32_t c = 0; c <= maxLabel; ++c) idx.classes.push_back(std::to_string(c));
  return idx;
}

}  // namespace exprun
