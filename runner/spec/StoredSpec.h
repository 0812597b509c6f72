// Purpose: reading a resolved spec where it is stored as JSON (result files, checkpoint metadata),
// tolerant of files written by older exprun versions. Code outside runner/spec/ asks these
// functions instead of spelling option names, so that renaming an option is a change in this
// folder only (tests/spec/StoredSpecTest.cpp holds them to the real option tables). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace exprun {

// train.precision ("fp32", "bf16", "fp16"), when the stored spec has it.
std::optional<std::string> storedPrecision(const nlohmann::json& spec);
// train.batch_size when it is a number (not auto), and train.accumulate (1 when absent).
std::optional<std::int64_t> storedMicroBatch(const nlohmann::json& spec);
std::int64_t storedAccumulate(const nlohmann::json& spec);
// The types of the spec's methods, in order (empty for specs from before methods).
std::vector<std::string> storedMethods(const nlohmann::json& spec);

// The train options that exprun itself chose for a run, copied from `from` into `into` (both
// stored specs), so that comparing the two leaves them out: the accumulation (which keeps a
// checkpoint's global batch on another number of ranks) and, with `planned`, what the memory plan
// chose (micro-batch, accumulation, precision, recomputed stages).
void copyChosenOptions(nlohmann::json& into, const nlohmann::json& from, bool planned);

// A stored spec as this exprun reads it: read back through today's option tables, so options added
// since it was written appear with their defaults (what the run that wrote it did: an option is
// added at the default that keeps the old behaviour). A spec that no longer reads (an option
// removed or renamed since) is returned as stored, so a comparison still names the option.
nlohmann::json storedSpecAsReadToday(const nlohmann::json& spec);
// Whether the stored spec was written before train.input existed (it trained on float batches;
// train.input: auto makes uint8 batches on CUDA where the data plugin can).
bool storedBeforeInputFormat(const nlohmann::json& spec);

// An option whose default changed: `former` was its default when older specs were stored, `today`
// is its default now (tests hold `today` to the option tables).
struct ChangedDefault {
  const char* section;
  const char* key;
  nlohmann::json former, today;
};
const std::vector<ChangedDefault>& changedDefaults();
// Where `stored` holds an option's former default and `current` its default of today, the stored
// value is taken as today's: a spec stored before the change said nothing else than the spec of
// today that says nothing. Returns "section.key: former -> today" for each (for a warning).
std::vector<std::string> adoptChangedDefaults(nlohmann::json& stored, const nlohmann::json& current);

}  // namespace exprun
