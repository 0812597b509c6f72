// Purpose: a libFuzzer target for the spec loader: YAML text and --set strings in, a resolved spec
// or a SpecError out — nothing else (no other exception, crash, leak, hang or undefined
// behaviour; built with AddressSanitizer and UndefinedBehaviorSanitizer by bench/fuzz_spec.sh).
// Input: the YAML text, then optionally a NUL byte and --set strings separated by newlines.
// The plugin catalog here is a stand-in for the real plugins (which need LibTorch): one plugin per
// kind under the real names, with options of every type, bounds and choices, so validation runs
// its full course; a resolved spec is also written back out (YAML and JSON) and loaded again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runner/spec/Catalog.h"
#include "runner/spec/Spec.h"

namespace {

void registerStandIns() {
  using namespace exprun;
  auto& c = Catalog::instance();
  const OptionDecls common{intOpt("width", 32, "an int with bounds", 1, 4096), floatOpt("rate", 0.1, "a float", 0.0, 1.0),
                           boolOpt("flag", false, "a bool"), stringOpt("mode", "a", "a choice", {"a", "b", "c"}),
                           intListOpt("milestones", std::vector<std::int64_t>{}, "an int list", 0),
                           floatListOpt("betas", std::vector<double>{0.9, 0.999}, "a float list"),
                           OptionDecl{"stages", OptionType::StringList, Value(std::vector<std::string>{}),
                                      "a string list", std::nullopt, std::nullopt, {}}};
  for (const auto& [kind, names] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"model", {"small_cnn", "resnet18", "resnet50"}},
           {"data", {"fashion_mnist", "synthetic", "imagefolder"}},
           {"optimizer", {"sgd", "adamw"}},
           {"scheduler", {"constant", "cosine", "multistep", "onecycle"}},
           {"comm", {"allreduce", "powersgd"}}}) {
    for (const auto& name : names) {
      OptionDecls decls = common;
      if (kind == "optimizer") decls.push_back(floatOpt("lr", 0.1, "learning rate", 0.0));
      c.add(PluginInfo{kind, name, "stand-in", decls});
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool once = (registerStandIns(), true);
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
