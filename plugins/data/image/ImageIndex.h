// Purpose: the sample list of an image dataset: torchvision's ImageFolder layout (one folder per
// class, classes by sorted folder name, files found recursively and sorted, image extensions
// matched case-insensitively) or a list file of "path label" lines. Folder scans are cached in a
// file keyed by the folder's path and checked against every scanned directory's modification
// time, so an unchanged ImageNet tree is not walked again.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace exprun {

class IndexError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ImageIndex {
  std::vector<std::string> classes;  // folder names, or "0".."N-1" for a list file
  std::vector<std::string> paths;    // file paths (the folder or root prefixed)
  std::vector<std::int32_t> labels;
  bool fromCache = false;
};

// torchvision's IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (any case).
bool hasImageExtension(const std::string& name);

// Sorted names of the sub-folders of `dir` (the classes); throws IndexError if `dir` is missing.
std::vector<std::string> listClassFolders(const std::string& dir);

// Scans `dir`; with a non-empty `cacheDir`, reuses or refreshes the cached scan there (a cache that
// cannot be written is only a warning). Throws IndexError for a missing folder, no classes, or
// classes without any image file (named).
ImageIndex indexImageFolder(const std::string& dir, const std::string& cacheDir);

// Reads a list file: one "path label" per line (the label is the last field; '#' comments and
// blank lines skipped); relative paths are taken under `root`. Errors name file:line.
ImageIndex readImageList(const std::string& listFile, const std::string& root);

}  // namespace exprun
