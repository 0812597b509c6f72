// Purpose: typed option structs. The fields of a struct are bound once to their option
// declarations — name, one line of help, range or choices — and the default of each option is the
// struct's own member initialiser.
// Rule: from that one binding come the declarations (spec validation, `exprun plugins`), the typed
// value read from validated Options (what a plugin or the trainer uses), and the Options written
// back from a value (the resolved spec's YAML and JSON).
#pragma once

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runner/spec/Options.h"

namespace exprun {

// Inclusive bounds of a number (or of every element of a list of numbers).
struct Limits {
  Limits() = default;
  Limits(std::optional<double> lo, std::optional<double> hi = std::nullopt) : min(lo), max(hi) {}
  std::optional<double> min, max;
};

template <class T>
struct OptionField {
  OptionDecl decl;
  std::function<void(T&, const Value&)> read;
  std::function<Value(const T&)> write;
};

//   struct CosineSettings { double minFactor = 0.0; };
//   const OptionTable<CosineSettings> kCosineOptions{
//       field("min_factor", &CosineSettings::minFactor, "final lr as a fraction of lr", {0.0, 1.0})};
//   CosineSettings s = kCosineOptions.read(options);
template <class T>
class OptionTable {
 public:
  OptionTable(std::vector<OptionField<T>> fields) : fields_(std::move(fields)) {}

  OptionDecls decls() const {
    OptionDecls d;
    for (const auto& f : fields_) d.push_back(f.decl);
    return d;
  }
  // The typed value of validated options (every field's option must be among them).
  T read(const Options& o) const {
    T t{};
    readInto(t, o);
    return t;
  }
  // Sets the bound fields of `t` from `o`; other members of `t` are left as they are.
  void readInto(T& t, const Options& o) const {
    for (const auto& f : fields_) f.read(t, o.value(f.decl.name));
  }
  // Options holding `t`, in declaration order (`type`: the plugin type, empty for a section).
  Options write(const T& t, std::string type = {}) const {
    std::vector<std::pair<std::string, Value>> values;
    for (const auto& f : fields_) values.emplace_back(f.decl.name, f.write(t));
    return Options(std::move(type), std::move(values));
  }
  const std::vector<OptionField<T>>& fields() const { return fields_; }
  // This table's fields followed by `more`'s (for option groups shared by plugins of a kind).
  template <class U>
  OptionDecls with(const OptionTable<U>& more) const {
    OptionDecls d = decls(), m = more.decls();
    d.insert(d.end(), m.begin(), m.end());
    return d;
  }

 private:
  std::vector<OptionField<T>> fields_;
};

namespace detail {
template <class M>
struct OptionTypeOf;
template <>
struct OptionTypeOf<std::int64_t> {
  static constexpr OptionType kType = OptionType::Int;
};
template <>
struct OptionTypeOf<double> {
  static constexpr OptionType kType = OptionType::Float;
};
template <>
struct OptionTypeOf<bool> {
  static constexpr OptionType kType = OptionType::Bool;
};
template <>
struct OptionTypeOf<std::string> {
  static constexpr OptionType kType = OptionType::String;
};
template <>
struct OptionTypeOf<std::vector<std::int64_t>> {
  static constexpr OptionType kType = OptionType::IntList;
};
template <>
struct OptionTypeOf<std::vector<double>> {
  static constexpr OptionType kType = OptionType::FloatList;
};
template <>
struct OptionTypeOf<std::vector<std::string>> {
  static constexpr OptionType kType = OptionType::StringList;
};
}  // namespace detail

// A field of one of the option types (int64, double, bool, string, or a list of them).
template <class T, class M>
OptionField<T> field(std::string name, M T::*member, std::string help, Limits limits = {}) {
  OptionDecl d{
      std::move(name), detail::OptionTypeOf<M>::kType, Value{T{}.*member}, std::move(help), limits.min, limits.max, {}};
  return {std::move(d), [member](T& t, const Value& v) { t.*member = std::get<M>(v); },
          [member](const T& t) { return Value{t.*member}; }};
}

// The fields of `table` (a struct S's) as fields of T, reached through T's member `member`: a
// section made of one struct per concern keeps its keys flat (train.accumulate is
// TrainConfig::batching.accumulate).
template <class T, class S>
std::vector<OptionField<T>> nested(S T::*member, const OptionTable<S>& table) {
  std::vector<OptionField<T>> out;
  for (const auto& f : table.fields())
    out.push_back(OptionField<T>{f.decl, [member, read = f.read](T& t, const Value& v) { read(t.*member, v); },
                                 [member, write = f.write](const T& t) { return write(t.*member); }});
  return out;
}

// Several lists of fields, one after the other.
template <class T>
std::vector<OptionField<T>> concat(std::initializer_list<std::vector<OptionField<T>>> lists) {
  std::vector<OptionField<T>> out;
  for (const auto& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

// A string field that takes one of `choices`.
template <class T>
OptionField<T> oneOf(std::string name, std::string T::*member, std::vector<std::string> choices, std::string help) {
  OptionField<T> f = field(std::move(name), member, std::move(help));
  f.decl.choices = std::move(choices);
  return f;
}

// An enumeration field, written in specs by the names given (the first name of each value).
template <class T, class E>
OptionField<T> choice(std::string name, E T::*member, std::vector<std::pair<std::string, E>> names, std::string help) {
  auto nameOf = [names](E e) {
    for (const auto& [n, v] : names)
      if (v == e) return n;
    throw std::logic_error("enumeration value without a name");
  };
  std::vector<std::string> choices;
  for (const auto& [n, v] : names) choices.push_back(n);
  OptionDecl d{std::move(name), OptionType::String, Value{nameOf(T{}.*member)}, std::move(help),
               std::nullopt,    std::nullopt,       std::move(choices)};
  return {std::move(d),
          [member, names](T& t, const Value& v) {
            const auto& s = std::get<std::string>(v);
            for (const auto& [n, e] : names)
              if (n == s) {
                t.*member = e;
                return;
              }
            throw std::logic_error("'" + s + "' is not among the declared choices");
          },
          [member, nameOf](const T& t) { return Value{nameOf(t.*member)}; }};
}

// An integer field that may also be `auto` (nullopt), e.g. train.batch_size; 0 means auto too.
template <class T>
OptionField<T> intOrAuto(std::string name, std::optional<std::int64_t> T::*member, std::string help,
                         Limits limits = {}) {
  auto toValue = [](const std::optional<std::int64_t>& v) { return v ? Value{*v} : Value{std::string(kAuto)}; };
  OptionDecl d{std::move(name), OptionType::Int, toValue(T{}.*member), std::move(help), limits.min,
               limits.max,      {kAuto}};
  return {std::move(d),
          [member](T& t, const Value& v) {
            if (std::holds_alternative<std::string>(v) || std::get<std::int64_t>(v) == 0)
              t.*member = std::nullopt;
            else
              t.*member = std::get<std::int64_t>(v);
          },
          [member, toValue](const T& t) { return toValue(t.*member); }};
}

}  // namespace exprun
