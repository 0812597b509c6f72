// Purpose: the result file (schema 1): resolved spec, provenance, one record per epoch, summary.
// Written atomically (temp file in the same directory, fsync, rename) after every epoch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace exprun {

inline constexpr int kResultSchema = 1;

struct EpochRecord {
  std::int64_t epoch = 0;  // 1-based
  double timeS = 0;
  double imagesPerS = 0;
  double dataWaitS = 0;
  double trainLoss = 0;
  double trainTop1 = 0;  // percent
  double valLoss = 0;
  double valTop1 = 0;  // percent
  double valTop5 = 0;  // percent
  double lr = 0;       // learning rate at the end of the epoch
  std::int64_t peakMemoryBytes = 0;  // max over ranks
  std::vector<std::int64_t> peakMemoryPerRank;
  double commWaitS = 0;  // time blocked on gradient communication after backward (slowest rank)
  double gradNorm = 0;           // mean gradient L2 norm (before clipping) over the epoch's optimizer steps
  double lossScale = 1;          // fp16 loss scale at the end of the epoch (1 otherwise)
  std::int64_t skippedSteps = 0;  // optimizer steps skipped for inf/NaN gradients, since the start
  std::int64_t skippedImages = 0;  // bad image files replaced by other samples in this epoch (all ranks)
  std::optional<double> valTop1Ema;  // Top-1 of the EMA weights, when EMA is on
  std::int64_t commBytes = 0;        // bytes a rank passed to gradient allreduces in the epoch (max over ranks)
  double commBytesPerStep = 0;       // the same per optimizer step
  std::int64_t steps = 0;
  std::int64_t samples = 0;
};

nlohmann::json toJson(const EpochRecord& e);
// j[key] as a double; null (how JSON stores NaN and infinities, e.g. a diverged loss) reads as NaN.
double jsonNumber(const nlohmann::json& j, const char* key);
EpochRecord epochFromJson(const nlohmann::json& j);

class ResultFile {
 public:
  ResultFile(std::string name, nlohmann::json spec, nlohmann::json provenance);
  void addEpoch(const EpochRecord& e);
  void setStatus(const std::string& status) { status_ = status; }  // "running", "completed", "interrupted"
  const std::vector<EpochRecord>& epochs() const { return epochs_; }
  nlohmann::json toJson() const;
  // Atomic write; throws std::runtime_error naming the path on failure.
  void write(const std::string& path) const;

 private:
  std::string name_;
  nlohmann::json spec_;
  nlohmann::json provenance_;
  std::string status_ = "running";
  std::vector<EpochRecord> epochs_;
};

// Writes `text` to `path` atomically: temp file beside it, fsync, rename.
void writeFileAtomically(const std::string& path, const std::string& text);

}  // namespace exprun
