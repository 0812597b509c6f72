// Purpose: reading stored specs (see StoredSpec.h).
#include "runner/spec/StoredSpec.h"

#include "runner/spec/Sections.h"
#include "runner/spec/Spec.h"

namespace exprun {
namespace {

const nlohmann::json* trainOf(const nlohmann::json& spec) {
  if (!spec.is_object()) return nullptr;
  auto it = spec.find(specKey::kTrain);
  return it != spec.end() && it->is_object() ? &*it : nullptr;
}

}  // namespace

std::optional<std::string> storedPrecision(const nlohmann::json& spec) {
  const nlohmann::json* train = trainOf(spec);
  if (!train || !train->contains(specKey::kPrecision) || !(*train)[specKey::kPrecision].is_string()) return std::nullopt;
  return (*train)[specKey::kPrecision].get<std::string>();
}

std::optional<std::int64_t> storedMicroBatch(const nlohmann::json& spec) {
  const nlohmann::json* train = trainOf(spec);
  if (!train || !train->contains(specKey::kBatchSize) || !(*train)[specKey::kBatchSize].is_number_integer())
    return std::nullopt;
  return (*train)[specKey::kBatchSize].get<std::int64_t>();
}

std::int64_t storedAccumulate(const nlohmann::json& spec) {
  const nlohmann::json* train = trainOf(spec);
  if (!train || !train->contains(specKey::kAccumulate)) return 1;
  return (*train)[specKey::kAccumulate].get<std::int64_t>();
}

std::vector<std::string> storedMethods(const nlohmann::json& spec) {
  std::vector<std::string> out;
  if (!spec.is_object() || !spec.contains(specKey::kMethods) || !spec[specKey::kMethods].is_array()) return out;
  for (const auto& m : spec[specKey::kMethods])
    if (m.is_object() && m.contains("type") && m["type"].is_string()) out.push_back(m["type"].get<std::string>());
  return out;
}

void copyChosenOptions(nlohmann::json& into, const nlohmann::json& from, bool planned) {
  const nlohmann::json* theirs = trainOf(from);
  if (!theirs || !trainOf(into)) return;
  std::vector<const char*> keys{specKey::kAccumulate};
  if (planned) keys.insert(keys.end(), {specKey::kBatchSize, specKey::kPrecision, specKey::kActivationCheckpointing});
  for (const char* key : keys)
    if (theirs->contains(key)) into[specKey::kTrain][key] = (*theirs)[key];
}

const std::vector<ChangedDefault>& changedDefaults() {
  // The CUDA defaults became the paths a GPU has run (the others opt-in until the GPU check runs them).
  static const std::vector<ChangedDefault> changed{
      {"train", "input", "auto", "float"},
      {"train", "copy_ahead", 2, 0},
      {"optimizer", "impl", "auto", "per_param"},
  };
  return changed;
}

std::vector<std::string> adoptChangedDefaults(nlohmann::json& stored, const nlohmann::json& current) {
  std::vector<std::string> adopted;
  for (const ChangedDefault& c : changedDefaults()) {
    auto at = [&](const nlohmann::json& spec) -> const nlohmann::json* {
      if (!spec.is_object() || !spec.contains(c.section) || !spec[c.section].is_object()) return nullptr;
      const auto it = spec[c.section].find(c.key);
      return it == spec[c.section].end() ? nullptr : &*it;
    };
    const nlohmann::json *theirs = at(stored), *mine = at(current);
    if (!theirs || !mine || *theirs != c.former || *mine != c.today) continue;
    stored[c.section][c.key] = c.today;
    adopted.push_back(std::string(c.section) + "." + c.key + ": " + c.former.dump() + " -> " + c.today.dump());
  }
  return adopted;
}

bool storedBeforeInputFormat(const nlohmann::json& spec) {
  return spec.is_object() && spec.contains("train") && spec["train"].is_object() && !spec["train"].contains("input");
}

nlohmann::json storedSpecAsReadToday(const nlohmann::json& spec) {
  if (!spec.is_object() || spec.empty()) return spec;
  try {
    return loadSpecFromString(spec.dump(), "stored spec").toJson();
  } catch (const std::exception&) {
    return spec;
  }
}

}  // namespace exprun
