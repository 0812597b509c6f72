// Purpose: small helpers shared by tests: a scratch directory removed at scope exit, file I/O,
// Python reference values from the venv's torch/torchvision, the fashion_mnist plugin from a spec,
// and "this throws a SpecError whose message contains ...".
#pragma once

#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runner/api/Data.h"
#include "runner/spec/Options.h"
#include "runner/spec/Spec.h"

namespace exprun::test {

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("exprun-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// A validated option's value (tests look options up by name; the code reads them through option
// tables into typed structs).
template <class T>
const T& optionValue(const Options& o, const std::string& name) {
  return std::get<T>(o.value(name));
}

inline void writeText(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

inline std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Fashion-MNIST's folder: the dataset package's, or EXPRUN_TEST_FASHION_MNIST (the GPU machine has
// no package: scripts/gpu/pack.sh carries a copy whose first images are real).
inline const std::string kFashionMnistRoot = [] {
  const char* e = std::getenv("EXPRUN_TEST_FASHION_MNIST");
  return std::string(e && *e ? e : "/usr/share/datasets/fashion-mnist");
}();

// The fashion_mnist data plugin built from a spec with `sets` (not loaded yet), reading kFashionMnistRoot.
inline std::unique_ptr<Dataset> fashionMnistData(std::vector<std::string> sets) {
  sets.insert(sets.begin(), "data.root=" + kFashionMnistRoot);
  Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: fashion_mnist}\n", "s.yaml", sets);
  return registry<DataKind>().get(s.data.type())(s.data);
}

// Runs a shell command with its output discarded; its exit code (-1 when it did not exit).
inline int runQuiet(const std::string& cmd) {
  const int status = std::system((cmd + " > /dev/null 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Runs `script` (Python source) with the set-up's venv Python and `args`; returns its standard
// output (for reference values from torch / torchvision). Fails the test, with the script's
// output, when the venv is not configured or the script fails.
inline std::string runPython(const std::string& script, const std::vector<std::string>& args = {}) {
  const std::string py = EXPRUN_PYTHON_EXE;
  REQUIRE_MESSAGE(!py.empty(), "the venv python is not configured (EXPRUN_PYTHON)");
  TempDir dir;
  writeText(dir.file("script.py"), script);
  std::string cmd = py + " " + dir.file("script.py");
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>" + dir.file("stderr.txt");
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  REQUIRE_MESSAGE(status == 0, "python failed: " << readText(dir.file("stderr.txt")) << out);
  return out;
}

}  // namespace exprun::test

// Checks that `expr` throws `Exc` and that its what() contains every string given.
#define CHECK_THROWS_CONTAINING(Exc, expr, ...)                                      \
  do {                                                                               \
    bool thrown_ = false;                                                            \
    try {                                                                            \
      (void)(expr);                                                                  \
    } catch (const Exc& e_) {                                                        \
      thrown_ = true;                                                                \
      const std::string msg_ = e_.what();                                            \
      for (const std::string& part_ : std::initializer_list<std::string>{__VA_ARGS__}) \
        CHECK_MESSAGE(msg_.find(part_) != std::string::npos, "missing '" << part_ << "' in: " << msg_); \
    }                                                                                \
    CHECK_MESSAGE(thrown_, "expected " #Exc " from " #expr);                         \
  } while (0)
