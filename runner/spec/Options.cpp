// Purpose: option declarations' builders and typed accessors of validated option values.
#include "runner/spec/Options.h"

#include <cmath>
#include <iomanip>
#include <sstream>

namespace exprun {

const char* optionTypeName(OptionType t) {
  switch (t) {
    case OptionType::Int: return "int";
    case OptionType::Float: return "float";
    case OptionType::Bool: return "bool";
    case OptionType::String: return "string";
    case OptionType::IntList: return "list[int]";
    case OptionType::FloatList: return "list[float]";
    case OptionType::StringList: return "list[string]";
  }
  return "?";
}

namespace {
std::string floatToString(double d) {
  if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1e15) {
    std::ostringstream os;
    os << static_cast<long long>(d) << ".0";
    return os.str();
  }
  std::ostringstream os;
  os << std::setprecision(10) << d;
  return os.str();
}
template <class T, class F>
std::string listToString(const std::vector<T>& v, F f) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + f(v[i]);
  return s + "]";
}
}  // namespace

std::string valueToString(const Value& v) {
  struct Visitor {
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return floatToString(d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const { return s; }
    std::string operator()(const std::vector<std::int64_t>& l) const {
      return listToString(l, [](std::int64_t i) { return std::to_string(i); });
    }
    std::string operator()(const std::vector<double>& l) const { return listToString(l, floatToString); }
    std::string operator()(const std::vector<std::string>& l) const {
      return listToString(l, [](const std::string& s) { return s; });
    }
  };
  return std::visit(Visitor{}, v);
}

nlohmann::json valueToJson(const Value& v) {
  return std::visit([](const auto& x) { return nlohmann::json(x); }, v);
}

Value valueFromJson(const nlohmann::json& j, OptionType type) {
  if (j.is_string() && type != OptionType::String) return j.get<std::string>();  // an int option's "auto"
  switch (type) {
    case OptionType::Int: return j.get<std::int64_t>();
    case OptionType::Float: return j.get<double>();
    case OptionType::Bool: return j.get<bool>();
    case OptionType::String: return j.get<std::string>();
    case OptionType::IntList: return j.get<std::vector<std::int64_t>>();
    case OptionType::FloatList: return j.get<std::vector<double>>();
    case OptionType::StringList: return j.get<std::vector<std::string>>();
  }
  throw std::logic_error("valueFromJson: unknown option type");
}

const Value* Options::find(const std::string& name) const {
  for (const auto& [k, v] : values_)
    if (k == name) return &v;
  return nullptr;
}

const Value& Options::value(const std::string& name) const {
  const Value* v = find(name);
  if (!v) throw std::logic_error("option '" + name + "' is not declared for '" + type_ + "'");
  return *v;
}

void Options::set(const std::string& name, Value v) {
  for (auto& [k, old] : values_)
    if (k == name) {
      old = std::move(v);
      return;
    }
  throw std::logic_error("option '" + name + "' is not declared for '" + type_ + "': cannot set it");
}

const Options& Options::child(const std::string& key) const {
  for (const auto& [k, node] : children_)
    if (k == key) return node;
  throw std::logic_error("plugin '" + type_ + "' has no nested node '" + key + "'");
}

void Options::setChild(const std::string& key, Options node) {
  for (auto& [k, existing] : children_)
    if (k == key) {
      existing = std::move(node);
      return;
    }
  children_.emplace_back(key, std::move(node));
}

}  // namespace exprun
