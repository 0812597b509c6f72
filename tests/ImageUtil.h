// Purpose: what the tests of the imagefolder plugin share (tests/plugins/ImageFolderTest.cpp,
// tests/data/GpuJpegTest.cpp): the tree of real photographs the CTest fixture builds
// (tests/fixtures/make_image_tree.py; its folder comes in EXPRUN_TEST_IMAGES) and the plugin
// loaded over a root of it.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "runner/api/Data.h"
#include "runner/spec/Spec.h"
#include "tests/TestUtil.h"

namespace exprun::test {

inline std::string images() {
  const char* d = std::getenv("EXPRUN_TEST_IMAGES");
  REQUIRE_MESSAGE(d != nullptr, "EXPRUN_TEST_IMAGES is not set: run through CTest (its fixture builds the image tree)");
  return d;
}

// The imagefolder plugin over `root` with the spec's `sets`, its file lists not cached, loaded.
inline std::unique_ptr<Dataset> makeImageData(const std::string& root, std::vector<std::string> sets = {}) {
  sets.push_back("data.root=" + root);
  sets.push_back("data.cache_dir=off");
  Spec s = loadSpecFromString("name: t\nmodel: {type: small_cnn}\ndata: {type: imagefolder}\n", "s.yaml", sets);
  auto d = registry<DataKind>().get(s.data.type())(s.data);
  d->load();
  return d;
}

}  // namespace exprun::test
