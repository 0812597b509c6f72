// Purpose: plugin registries. Each plugin kind (model, data, optimizer, scheduler) has one typed
// Registry<Factory>; every registration also lands in the torch-free Catalog (name, help, option
// declarations), which spec validation and `exprun plugins` read. Duplicate names are an error.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

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
  std::vector<std::string> kinds() const;                          // sorted

 private:
  std::map<std::string, std::map<std::string, PluginInfo>> byKind_;
};

template <class Factory>
class Registry {
 public:
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  void add(const std::string& name, const std::string& help, OptionDecls options, Factory factory) {
    Catalog::instance().add(PluginInfo{kind_, name, help, std::move(options)});
    factories_.emplace(name, std::move(factory));
  }
  const Factory& get(const std::string& name) const {
    auto it = factories_.find(name);
    if (it == factories_.end())
      throw std::runtime_error("no " + kind_ + " plugin named '" + name + "'");
    return it->second;
  }
  const std::string& kind() const { return kind_; }

 private:
  std::string kind_;
  std::map<std::string, Factory> factories_;
};

}  // namespace exprun
