// Purpose: the catalog of declared plugins — for every plugin kind (model, data, task, optimizer,
// scheduler, comm, pruner, method), the names registered, their one line of help, their option
// declarations and nested plugin nodes, their check of the whole spec and (methods) their report
// columns.
// Spec validation checks a plugin node against it and `exprun plugins` lists it; the plugins fill
// it when they register (runner/api/Registry.h). Torch-free.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/spec/Options.h"

namespace exprun {

struct Spec;

// A plugin node nested in a plugin's own (the prune method's `pruner: {type: l1_filter}`): its key,
// its kind, the type when the spec gives none.
struct NestedNode {
  std::string key, kind, defaultType;
};

// A spec that a plugin cannot run with, found by its check: `key` is the option's path inside the
// plugin's node ("qat_epochs"; empty: the node itself), `what` says why and what would do.
class SpecProblem : public std::invalid_argument {
 public:
  SpecProblem(std::string key, const std::string& what) : std::invalid_argument(what), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

// A plugin's check of the whole resolved spec (choices that only make sense together, its place
// among the spec's methods): `index` is its node's position in the list it is in (spec.methods), 0
// otherwise. Throws SpecProblem; spec loading turns it into a SpecError at the node's location.
using SpecCheck = std::function<void(const Spec& spec, std::size_t index)>;

// A column a method adds to `exprun report`: the value at `pointer` (a JSON pointer, "/flops_removed")
// in its section of the result file, printed with `format` (printf, for a number; "" for text).
struct ResultColumn {
  std::string title, key, pointer, format;
};

struct PluginInfo {
  std::string kind;
  std::string name;
  std::string help;
  OptionDecls options;
  std::vector<NestedNode> nested;
  SpecCheck check;                    // empty: none
  std::vector<ResultColumn> columns;  // methods: the report's columns of their figures
  std::string impliedTask;            // data plugins: the task a spec without one gets ("": classification)
  std::vector<std::string> tasks;     // methods: the tasks they work with (empty: every task)
  // methods: why they cannot run with distributed.shard: gradients ("": they can)
  std::string notWithShardedGradients;
};

class Catalog {
 public:
  static Catalog& instance();
  // Throws std::logic_error on a duplicate (kind, name).
  void add(PluginInfo info);
  const PluginInfo* find(const std::string& kind, const std::string& name) const;
  std::vector<std::string> names(const std::string& kind) const;  // sorted
  std::vector<std::string> kinds() const;                         // sorted
  // Every plugin as JSON ({kind: [{name, help, options: [{name, type, default, help, min, max,
  // choices}]}]}), and plugins added from such JSON (the spec fuzzer's stand-ins for the real ones,
  // which need LibTorch: tests/fuzz/SpecFuzz.cpp).
  nlohmann::json toJson() const;
  void addFromJson(const nlohmann::json& j);

 private:
  std::map<std::string, std::map<std::string, PluginInfo>> byKind_;
};

}  // namespace exprun
