// Purpose: a libFuzzer target for the spec loader: YAML text and --set strings in, a resolved spec
// or a SpecError out — nothing else (no other exception, crash, leak, hang or undefined
// behaviour; built with AddressSanitizer and UndefinedBehaviorSanitizer by bench/fuzz_spec.sh).
// Input: the YAML text, then optionally a NUL byte and --set strings separated by newlines.
// The plugin catalog is the real one's declarations, as `exprun plugins --json` prints them (the
// plugins themselves need LibTorch), so validation runs its full course against the options users
// have; a resolved spec is also written back out (YAML and JSON) and loaded again.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "runner/spec/Catalog.h"
#include "runner/spec/Spec.h"

namespace {

// The real plugins need LibTorch; their declarations do not: the catalog that `exprun plugins
// --json` printed (bench/fuzz_spec.sh writes it to $EXPRUN_FUZZ_CATALOG) is registered as it is.
void registerCatalog() {
  const char* path = std::getenv("EXPRUN_FUZZ_CATALOG");
  std::ifstream in(path ? path : "");
  if (!in) {
    std::fprintf(stderr, "SpecFuzz: set EXPRUN_FUZZ_CATALOG to the output of `exprun plugins --json`\n");
    std::abort();
  }
  exprun::Catalog::instance().addFromJson(nlohmann::json::parse(in));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool once = (registerCatalog(), true);
  (void)once;
  const std::string input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string yaml = input.substr(0, nul);
  std::vector<std::string> sets;
  if (nul != std::string::npos) {
    std::size_t start = nul + 1;
    while (start <= input.size()) {
      const auto end = input.find('\n', start);
      sets.push_back(input.substr(start, end == std::string::npos ? std::string::npos : end - start));
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  try {
    const exprun::Spec spec = exprun::loadSpecFromString(yaml, "fuzz.yaml", sets);
    const std::string again = spec.toYaml();
    (void)spec.toJson().dump();
    (void)exprun::loadSpecFromString(again, "resolved.yaml");  // a resolved spec loads back
  } catch (const exprun::SpecError&) {
    // the one allowed way to refuse
  }
  return 0;
}
