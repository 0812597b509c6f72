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
  std::int64_t peakMemoryBytes = 0;  // max over ranks (CPU: peak resident set; CUDA: peak allocated)
  std::int64_t peakAllocatedBytes = -1;  // peak bytes of live tensors, max over ranks (-1: not measured)
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
  double flopsPerS = 0;  // achieved: counted training FLOPs per image x images/s (all ranks)
  double mfu = 0;        // flopsPerS / the peak FLOP/s of all ranks' devices (0: unknown)
  bool partial = false;  // the run stopped inside this epoch (a target reached)
};

// One evaluation on the test split: after an epoch, or every train.eval_every_steps steps.
struct EvalRecord {
  std::int64_t step = 0;   // optimizer steps done
  std::int64_t epoch = 0;  // the epoch it was in (1-based)
  double timeS = 0;        // run clock at the end of the evaluation (run start -> here, evaluations included)
  double valLoss = 0, valTop1 = 0, valTop5 = 0;
};

// train.target_*: the metrics to reach; `met` when every target set holds.
struct Target {
  double top1 = 0, top5 = 0, valLoss = 0;  // 0: not set
  bool any() const { return top1 > 0 || top5 > 0 || valLoss > 0; }
  bool met(const EvalRecord& e) const {
    return any() && (top1 <= 0 || e.valTop1 >= top1) && (top5 <= 0 || e.valTop5 >= top5) &&
           (valLoss <= 0 || e.valLoss <= valLoss);
  }
  nlohmann::json toJson() const;
};

nlohmann::json toJson(const EpochRecord& e);
nlohmann::json toJson(const EvalRecord& e);
EvalRecord evalFromJson(const nlohmann::json& j);
// j[key] as a double; null (how JSON stores NaN and infinities, e.g. a diverged loss) reads as NaN.
double jsonNumber(const nlohmann::json& j, const char* key);
EpochRecord epochFromJson(const nlohmann::json& j);

class ResultFile {
 public:
  ResultFile(std::string name, nlohmann::json spec, nlohmann::json provenance);
  void addEpoch(const EpochRecord& e);
  void addEval(const EvalRecord& e);
  // A resumption on another number of ranks (runner/checkpoint/Checkpoint.h's WorldSizeChange), in the
  // file's "world_size_changes" list.
  void addWorldSizeChange(const nlohmann::json& change) { worldSizeChanges_.push_back(change); }
  // The run's target; the first evaluation that meets it is the summary's time to target.
  void setTarget(const Target& t) { target_ = t; }
  void setStatus(const std::string& status) { status_ = status; }  // "running", "completed", "interrupted"
  const std::vector<EpochRecord>& epochs() const { return epochs_; }
  const std::vector<EvalRecord>& evals() const { return evals_; }
  // The first evaluation meeting the target, if any.
  const EvalRecord* targetReached() const;
  nlohmann::json toJson() const;
  // Atomic write; throws std::runtime_error naming the path on failure.
  void write(const std::string& path) const;

 private:
  std::string name_;
  nlohmann::json spec_;
  nlohmann::json provenance_;
  std::string status_ = "running";
  std::vector<EpochRecord> epochs_;
  std::vector<EvalRecord> evals_;
  std::vector<nlohmann::json> worldSizeChanges_;
  Target target_;
};

}  // namespace exprun
