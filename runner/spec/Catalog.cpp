// Purpose: the process-wide catalog of registered plugins (names, help, option declarations).
#include "runner/spec/Catalog.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

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

namespace {

const OptionType kTypes[] = {OptionType::Int,     OptionType::Float,     OptionType::Bool,      OptionType::String,
                             OptionType::IntList, OptionType::FloatList, OptionType::StringList};

nlohmann::json declJson(const OptionDecl& d) {
  nlohmann::json j{{"name", d.name}, {"type", optionTypeName(d.type)}, {"help", d.help}, {"choices", d.choices}};
  if (d.defaultValue) j["default"] = valueToJson(*d.defaultValue);
  if (d.min) j["min"] = *d.min;
  if (d.max) j["max"] = *d.max;
  return j;
}

OptionDecl declFromJson(const nlohmann::json& j) {
  OptionDecl d;
  d.name = j.at("name").get<std::string>();
  const std::string type = j.at("type").get<std::string>();
  const OptionType* t = std::find_if(std::begin(kTypes), std::end(kTypes),
                                     [&](OptionType k) { return type == optionTypeName(k); });
  if (t == std::end(kTypes)) throw std::invalid_argument("catalog: unknown option type '" + type + "'");
  d.type = *t;
  d.help = j.value("help", "");
  d.choices = j.value("choices", std::vector<std::string>{});
  if (j.contains("default")) d.defaultValue = valueFromJson(j["default"], d.type);
  if (j.contains("min")) d.min = j["min"].get<double>();
  if (j.contains("max")) d.max = j["max"].get<double>();
  return d;
}

}  // namespace

nlohmann::json Catalog::toJson() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [kind, plugins] : byKind_)
    for (const auto& [name, info] : plugins) {
      nlohmann::json options = nlohmann::json::array();
      for (const auto& d : info.options) options.push_back(declJson(d));
      nlohmann::json nested = nlohmann::json::array();
      for (const auto& n : info.nested) nested.push_back({{"key", n.key}, {"kind", n.kind}, {"default_type", n.defaultType}});
      nlohmann::json entry{{"name", name}, {"help", info.help}, {"options", options}, {"nested", nested}};
      if (!info.impliedTask.empty()) entry["implied_task"] = info.impliedTask;
      j[kind].push_back(std::move(entry));
    }
  return j;
}

void Catalog::addFromJson(const nlohmann::json& j) {
  for (const auto& [kind, plugins] : j.items())
    for (const auto& p : plugins) {
      OptionDecls options;
      for (const auto& d : p.at("options")) options.push_back(declFromJson(d));
      std::vector<NestedNode> nested;
      for (const auto& n : p.value("nested", nlohmann::json::array()))
        nested.push_back(NestedNode{n.at("key").get<std::string>(), n.at("kind").get<std::string>(),
                                    n.value("default_type", "")});
      PluginInfo info{kind, p.at("name").get<std::string>(), p.value("help", ""), std::move(options), std::move(nested), {}, {},
                      p.value("implied_task", "")};
      add(std::move(info));
    }
}

}  // namespace exprun
