// Purpose: plugin registries, torch-free. There are eight plugin kinds (runner/api/Kinds.h):
// model, data, task, optimizer, scheduler, comm, pruner, method. A plugin is one file in plugins/<kind>/
// that ends with one registration line (Register), which adds its factory to registry<Kind>() and
// its name, help and option declarations to the Catalog that spec validation and `exprun plugins`
// read (runner/spec/Catalog.h). The core builds a spec node's plugin with build<Kind>(node, args...).
// Rule: duplicate names are an error. The registries are defined together in Registries.cpp.
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

  void add(PluginInfo info, Factory factory) {
    info.kind = Kind::kName;
    const std::string name = info.name;
    Catalog::instance().add(std::move(info));
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

// The registry of a kind (defined for the eight kinds in Registries.cpp).
template <class Kind>
Registry<Kind>& registry();

// The registration line at the bottom of a plugin's file (a namespace-scope constant):
//
//   const Register<SchedulerKind> kCosine{"cosine", "cosine decay ...", options.decls(), makeCosine};
//
// A plugin with more to declare than its options (nested plugin nodes, a check of the whole spec,
// report columns) fills a PluginInfo: Register<MethodKind>{info, factory}.
template <class Kind>
struct Register {
  Register(const std::string& name, const std::string& help, OptionDecls options, typename Kind::Factory factory) {
    PluginInfo info;
    info.name = name;
    info.help = help;
    info.options = std::move(options);
    registry<Kind>().add(std::move(info), std::move(factory));
  }
  Register(PluginInfo info, typename Kind::Factory factory) { registry<Kind>().add(std::move(info), std::move(factory)); }
};

// Builds the plugin that a validated spec node names: build<ModelKind>(spec.model, dataInfo).
template <class Kind, class... Args>
auto build(const Options& node, Args&&... args) {
  return registry<Kind>().get(node.type())(node, std::forward<Args>(args)...);
}

}  // namespace exprun
