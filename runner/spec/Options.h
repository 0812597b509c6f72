// Purpose: the one declaration of a plugin's (or a spec section's) options — name, type, default,
// range or choices, one-line help — and the typed, validated values handed to plugins.
// Everything after runner/spec/ sees Options, never raw YAML.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace exprun {

enum class OptionType { Int, Float, Bool, String, IntList, FloatList, StringList };

// The word an Int option that lists it among its choices takes instead of a number (held as a
// string Value), e.g. `batch_size: auto`.
inline constexpr const char* kAuto = "auto";

const char* optionTypeName(OptionType t);

// A typed option value. Lists hold scalars of one type.
using Value = std::variant<std::int64_t, double, bool, std::string, std::vector<std::int64_t>,
                           std::vector<double>, std::vector<std::string>>;

// Renders a value as a YAML flow scalar/sequence (used by `validate`, tables and errors).
std::string valueToString(const Value& v);
// A value as JSON, and back (`type` says which alternative; an Int option may hold "auto").
nlohmann::json valueToJson(const Value& v);
Value valueFromJson(const nlohmann::json& j, OptionType type);

struct OptionDecl {
  std::string name;
  OptionType type = OptionType::String;
  std::optional<Value> defaultValue;  // nullopt: required
  std::string help;
  std::optional<double> min;          // inclusive bounds for Int/Float (and list elements)
  std::optional<double> max;
  std::vector<std::string> choices;   // allowed values for String / StringList elements
};

using OptionDecls = std::vector<OptionDecl>;

// Validated values of one node, in declaration order; value() throws std::logic_error on a
// programming error (asking for an undeclared option). Code after runner/spec/ reads them through
// an OptionTable (runner/spec/OptionTable.h) into a typed struct, once.
class Options {
 public:
  Options() = default;
  Options(std::string type, std::vector<std::pair<std::string, Value>> values)
      : type_(std::move(type)), values_(std::move(values)) {}

  const std::string& type() const { return type_; }
  const std::vector<std::pair<std::string, Value>>& values() const { return values_; }

  bool has(const std::string& name) const { return find(name) != nullptr; }
  // The value of a declared option; std::logic_error when `name` is not one.
  const Value& value(const std::string& name) const;

  // Replaces the value of a declared option; std::logic_error for a name that is not declared.
  void set(const std::string& name, Value v);

  // The plugin nodes nested in this one (a method's pruner: {type: prune, pruner: {type: ...}}),
  // by key, in their declaration order.
  const std::vector<std::pair<std::string, Options>>& children() const { return children_; }
  // The nested node `key`; std::logic_error when there is none.
  const Options& child(const std::string& key) const;
  void setChild(const std::string& key, Options node);

 private:
  const Value* find(const std::string& name) const;

  std::string type_;  // plugin type; empty for plain sections (train, output)
  std::vector<std::pair<std::string, Value>> values_;
  std::vector<std::pair<std::string, Options>> children_;
};

}  // namespace exprun
