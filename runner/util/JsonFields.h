// Purpose: reading the JSON files exprun writes (result files, checkpoint metadata), checked field
// by field: every accessor names the field's path ("epochs[1].time_s") when it is missing or of
// another type, so that a damaged or hand-edited file gets an error that says where. Numbers may be
// null where exprun wrote a NaN or an infinity (JSON has neither): they read back as NaN.
// Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace exprun {

// "path: what"; the reader of a file prefixes the file's name.
class JsonFieldError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A JSON object and its path in the file ("" at the top level).
class JsonFields {
 public:
  // Throws JsonFieldError when `j` is not an object (`what`: what was expected, e.g. "an epoch object").
  JsonFields(const nlohmann::json& j, std::string path, const std::string& what = "an object");

  bool has(const std::string& key) const { return j_.contains(key); }
  const nlohmann::json& at(const std::string& key) const;  // missing: "missing required field"
  double number(const std::string& key) const;             // null reads as NaN
  double numberOr(const std::string& key, double fallback) const;
  std::int64_t integer(const std::string& key) const;      // a float with an integral value is taken
  std::int64_t integerOr(const std::string& key, std::int64_t fallback) const;
  bool boolean(const std::string& key) const;
  bool booleanOr(const std::string& key, bool fallback) const;
  std::string text(const std::string& key) const;
  std::string textOr(const std::string& key, const std::string& fallback) const;
  JsonFields object(const std::string& key, const std::string& what = "an object") const;
  // The array at `key` (empty when absent and `required` is false), each element an object.
  std::vector<JsonFields> objects(const std::string& key, const std::string& what, bool required) const;
  std::vector<std::int64_t> integers(const std::string& key) const;  // absent: empty
  std::map<std::string, std::int64_t> integerMap(const std::string& key) const;  // an object of integers; absent: empty

  // The path of `key` in this object, for messages.
  std::string pathOf(const std::string& key) const;
  // Throws JsonFieldError "pathOf(key): what".
  [[noreturn]] void fail(const std::string& key, const std::string& what) const;
  const nlohmann::json& json() const { return j_; }

 private:
  const nlohmann::json& j_;
  std::string path_;
};

// "number 1.5", "string \"fast\"": a value's type and (shortened) text, for messages.
std::string describeJson(const nlohmann::json& v);

}  // namespace exprun
