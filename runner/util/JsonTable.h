// Purpose: a record's JSON fields written once. A JsonTable lists, for every field of a struct, its
// key and how it is written and read back (checked, through JsonFields, naming the field's path).
// Rule: a file's writer and its reader both come from that one list, so that a field added to one
// is in the other. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/util/JsonFields.h"

namespace exprun {

template <class T>
struct JsonField {
  std::string key;
  std::function<void(nlohmann::json&, const T&)> write;  // may leave the key out
  std::function<void(T&, const JsonFields&)> read;
};

//   const JsonTable<EvalRecord> kEval{{jsonf::required("step", &EvalRecord::step),
//                                      jsonf::required("time_s", &EvalRecord::timeS)}};
//   nlohmann::json j = kEval.write(e);
//   EvalRecord e = kEval.read(JsonFields(j, "evals[0]"));
template <class T>
class JsonTable {
 public:
  JsonTable(std::vector<JsonField<T>> fields) : fields_(std::move(fields)) {}
  nlohmann::json write(const T& t) const {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& f : fields_) f.write(j, t);
    return j;
  }
  T read(const JsonFields& in) const {
    T t{};
    readInto(t, in);
    return t;
  }
  void readInto(T& t, const JsonFields& in) const {
    for (const auto& f : fields_) f.read(t, in);
  }
  const std::vector<JsonField<T>>& fields() const { return fields_; }

 private:
  std::vector<JsonField<T>> fields_;
};

namespace jsonio {

// How a member type is read from a checked object (a missing key throws; `has` is checked first
// for the fallbacks).
inline void get(const JsonFields& f, const std::string& k, double& v) { v = f.number(k); }
inline void get(const JsonFields& f, const std::string& k, std::int64_t& v) { v = f.integer(k); }
inline void get(const JsonFields& f, const std::string& k, int& v) { v = static_cast<int>(f.integer(k)); }
inline void get(const JsonFields& f, const std::string& k, bool& v) { v = f.boolean(k); }
inline void get(const JsonFields& f, const std::string& k, std::string& v) { v = f.text(k); }
inline void get(const JsonFields& f, const std::string& k, std::vector<std::int64_t>& v) {
  (void)f.at(k);
  v = f.integers(k);
}
inline void get(const JsonFields& f, const std::string& k, std::map<std::string, std::int64_t>& v) {
  (void)f.at(k);
  v = f.integerMap(k);
}

}  // namespace jsonio

// The field kinds, as jsonf::required(...), jsonf::optional(...), ...: required (always written,
// must be there), optional (always written; files from before it read `fallback`), unlessEqual
// (left out when it holds `unset`, which a file without it reads), ifSet (a std::optional, left out
// when empty), list (records of another table), custom (any writer and reader).
namespace jsonf {

template <class T, class M>
JsonField<T> required(std::string key, M T::*member) {
  return {key, [key, member](nlohmann::json& j, const T& t) { j[key] = t.*member; },
          [key, member](T& t, const JsonFields& f) { jsonio::get(f, key, t.*member); }};
}

template <class T, class M>
JsonField<T> optional(std::string key, M T::*member, M fallback) {
  return {key, [key, member](nlohmann::json& j, const T& t) { j[key] = t.*member; },
          [key, member, fallback](T& t, const JsonFields& f) {
            if (f.has(key))
              jsonio::get(f, key, t.*member);
            else
              t.*member = fallback;
          }};
}

template <class T, class M>
JsonField<T> unlessEqual(std::string key, M T::*member, M unset) {
  return {key,
          [key, member, unset](nlohmann::json& j, const T& t) {
            if (!(t.*member == unset)) j[key] = t.*member;
          },
          [key, member, unset](T& t, const JsonFields& f) {
            if (f.has(key))
              jsonio::get(f, key, t.*member);
            else
              t.*member = unset;
          }};
}

template <class T, class M>
JsonField<T> ifSet(std::string key, std::optional<M> T::*member) {
  return {key,
          [key, member](nlohmann::json& j, const T& t) {
            if (t.*member) j[key] = *(t.*member);
          },
          [key, member](T& t, const JsonFields& f) {
            if (!f.has(key)) return;
            M v{};
            jsonio::get(f, key, v);
            t.*member = v;
          }};
}

// Whether a list is always written and must be read (Required), always written and read as empty
// when missing (Optional), or left out when empty (OmittedWhenEmpty).
enum class Presence { Required, Optional, OmittedWhenEmpty };

// A list of records of another table; `what` names an element in errors ("an epoch object").
template <class T, class E>
JsonField<T> list(std::string key, std::vector<E> T::*member, const JsonTable<E>& table, std::string what,
                  Presence presence) {
  const bool required = presence == Presence::Required;
  const bool omitEmpty = presence == Presence::OmittedWhenEmpty;
  return {key,
          [key, member, &table, omitEmpty](nlohmann::json& j, const T& t) {
            if (omitEmpty && (t.*member).empty()) return;
            nlohmann::json a = nlohmann::json::array();
            for (const E& e : t.*member) a.push_back(table.write(e));
            j[key] = std::move(a);
          },
          [key, member, &table, what, required](T& t, const JsonFields& f) {
            (t.*member).clear();
            for (const JsonFields& e : f.objects(key, what, required)) (t.*member).push_back(table.read(e));
          }};
}

template <class T>
JsonField<T> custom(std::string key, std::function<void(nlohmann::json&, const T&)> write,
                    std::function<void(T&, const JsonFields&)> read) {
  return {std::move(key), std::move(write), std::move(read)};
}

}  // namespace jsonf
}  // namespace exprun
