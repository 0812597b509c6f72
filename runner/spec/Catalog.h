// Purpose: the catalog of declared plugins — for every plugin kind (model, data, optimizer,
// scheduler, comm), the names registered, their one line of help and their option declarations.
// Spec validation checks a plugin node against it and `exprun plugins` lists it; the plugins fill
// it when they register (runner/api/Registry.h). Torch-free.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/spec/Options.h"

namespace exprun {

struct PluginInfo {
  std::string kind;
  std::string name;
  std::string help;
  OptionDecls options;
};

class Catalog {
 public:
  static Catalog& instance();
  // Throws std::logic_error on a duplicate (kind, name).
  void add(PluginInfo info);
  const PluginInfo* find(const std::string& kind, const std::string& name) const;
  std::vector<std::string> names(const std::string& kind) const;  // sorted
  std::vector<std::string> kinds() const;                         // sorted
  // Every plugin as JSON ({kind: [{name, help, options: [{name, type, default, help, min, max,
  // choices}]}]}), and plugins added from such JSON (the spec fuzzer's stand-ins for the real ones,
  // which need LibTorch: tests/fuzz/SpecFuzz.cpp).
  nlohmann::json toJson() const;
  void addFromJson(const nlohmann::json& j);

 private:
  std::map<std::string, std::map<std::string, PluginInfo>> byKind_;
};

}  // namespace exprun
