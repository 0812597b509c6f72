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

OptionDecl intOpt(std::string name, std::optional<std::int64_t> def, std::string help,
                  std::optional<double> min, std::optional<double> max) {
  OptionDecl d{std::move(name), OptionType::Int, std::nullopt, std::move(help), min, max, {}};
  if (def) d.defaultValue = *def;
  return d;
}
OptionDecl floatOpt(std::string name, std::optional<double> def, std::string help,
                    std::optional<double> min, std::optional<double> max) {
  OptionDecl d{std::move(name), OptionType::Float, std::nullopt, std::move(help), min, max, {}};
  if (def) d.defaultValue = *def;
  return d;
}
OptionDecl boolOpt(std::string name, bool def, std::string help) {
  return OptionDecl{std::move(name), OptionType::Bool, Value{def}, std::move(help), std::nullopt,
                    std::nullopt, {}};
}
OptionDecl stringOpt(std::string name, std::optional<std::string> def, std::string help,
                     std::vector<std::string> choices) {
  OptionDecl d{std::move(name), OptionType::String, std::nullopt, std::move(help), std::nullopt,
               std::nullopt, std::move(choices)};
  if (def) d.defaultValue = *def;
  return d;
}
OptionDecl intListOpt(std::string name, std::vector<std::int64_t> def, std::string help,
                      std::optional<double> min) {
  return OptionDecl{std::move(name), OptionType::IntList, Value{std::move(def)}, std::move(help), min,
                    std::nullopt, {}};
}
OptionDecl floatListOpt(std::string name, std::vector<double> def, std::string help) {
  return OptionDecl{std::move(name), OptionType::FloatList, Value{std::move(def)}, std::move(help),
                    std::nullopt, std::nullopt, {}};
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

template <class T>
const T& Options::get(const std::string& name) const {
  if (const T* t = std::get_if<T>(&value(name))) return *t;
  throw std::logic_error("option '" + name + "' of '" + type_ + "' read with the wrong type");
}

std::int64_t Options::getInt(const std::string& n) const { return get<std::int64_t>(n); }
double Options::getFloat(const std::string& n) const { return get<double>(n); }
bool Options::getBool(const std::string& n) const { return get<bool>(n); }
const std::string& Options::getString(const std::string& n) const { return get<std::string>(n); }
const std::vector<std::int64_t>& Options::getIntList(const std::string& n) const {
  return get<std::vector<std::int64_t>>(n);
}
const std::vector<double>& Options::getFloatList(const std::string& n) const {
  return get<std::vector<double>>(n);
}
const std::vector<std::string>& Options::getStringList(const std::string& n) const {
  return get<std::vector<std::string>>(n);
}

void Options::set(const std::string& name, Value v) {
  for (auto& [k, old] : values_)
    if (k == name) {
      old = std::move(v);
      return;
    }
  throw std::logic_error("option '" + name + "' is not declared for '" + type_ + "': cannot set it");
}

}  // namespace exprun
