// Purpose: the resolved, typed experiment spec and how it is made from YAML:
// `base:` inheritance (deep merge, relative paths, cycle detection), `--set a.b=c` overrides
// (values parsed as YAML scalars), validation against the declared options of each section and
// plugin. Errors (SpecError) carry file:line:col and the key path. Raw YAML stops here.
// One table of sections (specSections()) drives validation, the YAML/JSON output, the start-up
// table and `exprun plugins`.
#pragma once

#include <array>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/spec/Options.h"
#include "runner/spec/Sections.h"

namespace exprun {

class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Spec {
  std::string name;
  std::int64_t seed = 0;
  // Plugin nodes: the type and its validated options (each plugin reads them into its own struct).
  Options model, data, task, optimizer, scheduler;
  // Fixed sections, typed.
  TrainConfig train;
  OutputConfig output;            // with output.checkpoint
  DistributedConfig distributed;  // with the distributed.comm plugin node
  // The methods that act on the run (plugins of kind `method`), in the order they act.
  std::vector<Options> methods;
  std::vector<std::string> files;       // the spec file and its bases, child first
  std::vector<std::string> overrides;   // the --set arguments, in order

  // Fully resolved spec (defaults filled in), as YAML text and as JSON.
  std::string toYaml() const;
  nlohmann::json toJson() const;
  // (section, key, value) rows for the start-up table.
  std::vector<std::array<std::string, 3>> rows() const;
  // 64-bit FNV-1a hash of the resolved spec's canonical JSON: equal on every rank of a run.
  std::uint64_t hash() const;
};

// A section of a spec: a fixed section (typed struct) or a plugin node. Nested sections
// (output.checkpoint, distributed.comm) are keys of their parent's mapping.
struct SectionInfo {
  std::string path;          // "train", "output.checkpoint", "distributed.comm", ...
  std::string pluginKind;    // plugin nodes: "model", "data", ...; empty for fixed sections
  std::string defaultType;   // plugin nodes: the type when none is given ("": the node is required)
  // Plugin nodes whose default type depends on the sections before them (the task: the data's).
  std::function<std::string(const Spec&)> defaultTypeFor;
  OptionDecls decls;         // fixed sections: their options
  std::function<Options(const Spec&)> get;
  std::function<void(Spec&, const Options&)> set;
};
// Every section, in the order of the resolved YAML.
const std::vector<SectionInfo>& specSections();

// Loads SPEC.yaml with its bases, applies the overrides ("a.b=c"), validates. Throws SpecError.
Spec loadSpec(const std::string& path, const std::vector<std::string>& overrides = {});
// Same from YAML text (tests); `virtualPath` names it in messages and anchors relative bases.
Spec loadSpecFromString(const std::string& yaml, const std::string& virtualPath,
                        const std::vector<std::string>& overrides = {});

// Edit distance, for "did you mean".
std::size_t editDistance(const std::string& a, const std::string& b);
std::string didYouMean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace exprun
