// Purpose: plugin registries, torch-free. There are five plugin kinds (runner/api/Kinds.h):
// model, data, optimizer, scheduler, comm. A plugin is one file in plugins/<kind>/ that ends with
// one registration line,
//
//   const Register<SchedulerKind> kCosine{"cosine", "cosine decay ...", options.decls(), makeCosine};
//
// which adds its factory to registry<Kind>() and its name, help and option declarations to the
// Catalog that spec validation and `exprun plugins` read (runner/spec/Catalog.h). The core builds a spec node's plugin
// with build<Kind>(node, args...). Duplicate names are an error. The registries are defined
// together in Registries.cpp.
#pragma once

#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runner/spec/Catalog.h"

namespace exprun {

// The factories of one plugin kind; Kind names it (Kind::kName) and gives its factory type.
template <class Kind>
class Registry {
 public:
  using Factory = typename Kind::Factory;

  void add(const std::string& name, const std::string& help, OptionDecls options, Factory factory) {
    Catalog::instance().add(PluginInfo{Kind::kName, name, help, std::move(options)});
    factories_.emplace(name, std::move(factory));
  }
  const Factory& get(const std::string& name) const {
    auto it = factories_.find(name);
    if (it == factories_.end())
      throw std::runtime_error(std::string("no ") + Kind::kName + " plugin named '" + name + "'");
    return it->second;
  }

 private:
  std::map<std::string, Factory> factories_;
};

// The registry of a kind (defined for the five kinds in Registries.cpp).
template <class Kind>
Registry<Kind>& registry();

// The registration line at the bottom of a plugin's file (a namespace-scope constant).
template <class Kind>
struct Register {
  Register(const std::string& name, const std::string& help, OptionDecls options, typename Kind::Factory factory) {
    registry<Kind>().add(name, help, std::move(options), std::move(factory));
  }
};

// Builds the plugin that a validated spec node names: build<ModelKind>(spec.model, dataInfo).
template <class Kind, class... Args>
auto build(const Options& node, Args&&... args) {
  return registry<Kind>().get(node.type())(node, std::forward<Args>(args)...);
}

}  // namespace exprun
