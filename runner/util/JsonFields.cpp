// Purpose: checked reading of exprun's JSON files (see JsonFields.h).
#include "runner/util/JsonFields.h"

#include <cmath>
#include <limits>

namespace exprun {

std::string describeJson(const nlohmann::json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

JsonFields::JsonFields(const nlohmann::json& j, std::string path, const std::string& what)
    : j_(j), path_(std::move(path)) {
  if (!j.is_object())
    throw JsonFieldError((path_.empty() ? std::string("(top level)") : path_) + ": expected " + what + ", got " +
                         describeJson(j));
}

std::string JsonFields::pathOf(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void JsonFields::fail(const std::string& key, const std::string& what) const {
  throw JsonFieldError(pathOf(key) + ": " + what);
}

const nlohmann::json& JsonFields::at(const std::string& key) const {
  auto it = j_.find(key);
  if (it == j_.end()) fail(key, "missing required field");
  return *it;
}

double JsonFields::number(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) fail(key, "expected a number, got " + describeJson(v));
  return v.get<double>();
}

double JsonFields::numberOr(const std::string& key, double fallback) const {
  return has(key) ? number(key) : fallback;
}

std::int64_t JsonFields::integer(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float() && std::isfinite(v.get<double>()) && std::floor(v.get<double>()) == v.get<double>())
    return static_cast<std::int64_t>(v.get<double>());
  fail(key, "expected an integer, got " + describeJson(v));
}

std::int64_t JsonFields::integerOr(const std::string& key, std::int64_t fallback) const {
  return has(key) ? integer(key) : fallback;
}

bool JsonFields::boolean(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + describeJson(v));
  return v.get<bool>();
}

bool JsonFields::booleanOr(const std::string& key, bool fallback) const { return has(key) ? boolean(key) : fallback; }

std::string JsonFields::text(const std::string& key) const {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describeJson(v));
  return v.get<std::string>();
}

std::string JsonFields::textOr(const std::string& key, const std::string& fallback) const {
  return has(key) ? text(key) : fallback;
}

JsonFields JsonFields::object(const std::string& key, const std::string& what) const {
  return JsonFields(at(key), pathOf(key), what);
}

std::vector<JsonFields> JsonFields::objects(const std::string& key, const std::string& what, bool required) const {
  std::vector<JsonFields> out;
  if (!required && !has(key)) return out;
  const nlohmann::json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + describeJson(v));
  for (std::size_t i = 0; i < v.size(); ++i) out.emplace_back(v[i], pathOf(key) + "[" + std::to_string(i) + "]", what);
  return out;
}

std::map<std::string, std::int64_t> JsonFields::integerMap(const std::string& key) const {
  std::map<std::string, std::int64_t> out;
  if (!has(key)) return out;
  const nlohmann::json& v = at(key);
  if (!v.is_object()) fail(key, "expected an object, got " + describeJson(v));
  for (const auto& [name, value] : v.items()) {
    if (!value.is_number_integer()) fail(key, name + ": expected an integer, got " + describeJson(value));
    out[name] = value.get<std::int64_t>();
  }
  return out;
}

std::vector<std::int64_t> JsonFields::integers(const std::string& key) const {
  std::vector<std::int64_t> out;
  if (!has(key)) return out;
  const nlohmann::json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + describeJson(v));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer())
      fail(key, "element " + std::to_string(i) + ": expected an integer, got " + describeJson(v[i]));
    out.push_back(v[i].get<std::int64_t>());
  }
  return out;
}

}  // namespace exprun
