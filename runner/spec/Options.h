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

struct OptionDecl {
  std::string name;
  OptionType type = OptionType::String;
  std::optional<Value> defaultValue;  // nullopt: required
  std::string help;
  std::optional<double> min;          // inclusive bounds for Int/Float (and list elements)
  std::optional<double> max;
  std::vector<std::string> choices;   // allowed values for String / StringList elements
};

// Fluent builders so a plugin's option table reads as one block.
OptionDecl intOpt(std::string name, std::optional<std::int64_t> def, std::string help,
                  std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);
OptionDecl floatOpt(std::string name, std::optional<double> def, std::string help,
                    std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt);
OptionDecl boolOpt(std::string name, bool def, std::string help);
OptionDecl stringOpt(std::string name, std::optional<std::string> def, std::string help,
                     std::vector<std::string> choices = {});
OptionDecl intListOpt(std::string name, std::vector<std::int64_t> def, std::string help,
                      std::optional<double> min = std::nullopt);
OptionDecl floatListOpt(std::string name, std::vector<double> def, std::string help);

using OptionDecls = std::vector<OptionDecl>;

// Validated values of one node, in declaration order; accessors throw std::logic_error on a
// programming error (asking for an undeclared option or the wrong type). Code after runner/spec/
// reads them through an OptionTable (runner/spec/OptionTable.h) into a typed struct, once.
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
  std::int64_t getInt(const std::string& name) const;
  double getFloat(const std::string& name) const;
  bool getBool(const std::string& name) const;
  const std::string& getString(const std::string& name) const;
  const std::vector<std::int64_t>& getIntList(const std::string& name) const;
  const std::vector<double>& getFloatList(const std::string& name) const;
  const std::vector<std::string>& getStringList(const std::string& name) const;

  // Replaces the value of a declared option; std::logic_error for a name that is not declared.
  void set(const std::string& name, Value v);

 private:
  const Value* find(const std::string& name) const;
  template <class T>
  const T& get(const std::string& name) const;

  std::string type_;  // plugin type; empty for plain sections (train, output)
  std::vector<std::pair<std::string, Value>> values_;
};

}  // namespace exprun
