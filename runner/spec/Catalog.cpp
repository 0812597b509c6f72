// Purpose: the process-wide catalog of registered plugins (names, help, option declarations).
#include "runner/spec/Catalog.h"

namespace exprun {

Catalog& Catalog::instance() {
  static Catalog catalog;
  return catalog;
}

void Catalog::add(PluginInfo info) {
  auto& kind = byKind_[info.kind];
  if (kind.count(info.name))
    throw std::logic_error("duplicate " + info.kind + " plugin name '" + info.name + "'");
  std::string name = info.name;
  kind.emplace(std::move(name), std::move(info));
}

const PluginInfo* Catalog::find(const std::string& kind, const std::string& name) const {
  auto k = byKind_.find(kind);
  if (k == byKind_.end()) return nullptr;
  auto it = k->second.find(name);
  return it == k->second.end() ? nullptr : &it->second;
}

std::vector<std::string> Catalog::names(const std::string& kind) const {
  std::vector<std::string> out;
  auto k = byKind_.find(kind);
  if (k != byKind_.end())
    for (const auto& [name, info] : k->second) out.push_back(name);
  return out;
}

std::vector<std::string> Catalog::kinds() const {
  std::vector<std::string> out;
  for (const auto& [kind, plugins] : byKind_) out.push_back(kind);
  return out;
}

}  // namespace exprun
