// Purpose: a checkpoint's meta.json, typed — what rank 0 records beside the tensors: the run's name
// and resolved spec (JSON, YAML and hash), where training stands (rank 0's position and meters,
// and the epoch's meters over all ranks, which a run resumed on another number of ranks starts
// from), the world size and batching, the shape of the data the model was built for, whether
// state.bin holds EMA weights, the result file's records so far, and every method's own entry.
// Its fields are written once, in one table (Meta.cpp). Format "exprun-checkpoint-1";
// fields added after it began are optional, and a checkpoint without one is refused only where a
// resumption needs it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/api/Data.h"
#include "runner/results/ResultFile.h"
#include "runner/step/Position.h"

namespace exprun {

struct CheckpointMeta {
  static constexpr const char* kFormat = "exprun-checkpoint-1";
  std::string name;
  int worldSize = 1;
  Progress progress;                  // rank 0's (older checkpoints: only step, epoch and micro)
  bool hasProgress = false;           // written by an exprun that resumes on another world size
  std::optional<EpochTotals> totals;  // the epoch's meters over all ranks (the same)
  nlohmann::json spec = nlohmann::json::object();  // the resolved spec as trained
  std::string specYaml;
  std::uint64_t specHash = 0;
  std::string model;  // the model plugin's type
  bool ema = false;   // state.bin holds EMA weights
  std::optional<DataInfo> data;       // the shape the model was built for
  // The result file's records, this attempt's as it stood at the save ("history", written by the
  // result file's own table; checkpoints before it: result_epochs, result_evals, ... at the top).
  RunHistory history;
  // The methods' entries by type (runner/api/Method.h: each one's state()); empty: none saved.
  nlohmann::json methods = nlohmann::json::object();
  std::optional<BatchShape> batch;    // older checkpoints: from the stored spec (shape())

  // The run's batching: `batch`, or for older checkpoints the stored spec's (lr and steps per epoch
  // unknown: 0). Throws CheckpointError when neither says.
  BatchShape shape(const std::string& where) const;
};

// <dir>/meta.json read and checked; throws CheckpointError naming the file (missing, damaged, not
// JSON, not an exprun checkpoint, a bad field).
CheckpointMeta readCheckpointMeta(const std::string& dir);

void to_json(nlohmann::json& j, const CheckpointMeta& m);
// Throws CheckpointError "not an exprun checkpoint" for another format, JsonFieldError for a bad field.
void from_json(const nlohmann::json& j, CheckpointMeta& m);

}  // namespace exprun
