// Purpose: the result file (schema 1), typed: the resolved spec and the provenance as the run
// recorded them at start-up, one record per epoch, every evaluation, the resumptions on another
// number of ranks, the run's status and target, and a summary derived from the records (best and
// final Top-1, times, the time to the target). The trainer keeps one per run (a checkpoint saves
// its records so far), writes it atomically after every epoch (runner/live/Sinks.h), and `exprun
// report` reads it back. Reading checks every field it takes and names the one that is wrong;
// fields added after schema 1 began are optional. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/metrics/Breakdown.h"
#include "runner/util/JsonFields.h"
#include "runner/util/JsonTable.h"

namespace exprun {

inline constexpr int kResultSchema = 1;

struct EpochRecord {
  std::int64_t epoch = 0;  // 1-based
  double timeS = 0;
  double imagesPerS = 0;  // the task's units per second when they are images (0 for tokens)
  std::optional<double> tokensPerS;     // language models: training tokens per second (evaluation excluded)
  std::optional<double> valPerplexity;  // language models: exp(val_loss)
  double dataWaitS = 0;
  double trainLoss = 0;
  double trainTop1 = 0;  // percent
  double valLoss = 0;
  double valTop1 = 0;  // percent
  double valTop5 = 0;  // percent
  double lr = 0;       // learning rate at the end of the epoch
  // The training steps' peaks (evaluations apart, below): max over ranks (CPU: peak resident set;
  // CUDA: peak allocated), and of live tensors (-1: not measured); per rank.
  std::int64_t peakMemoryBytes = 0;
  std::int64_t peakAllocatedBytes = -1;
  std::vector<std::int64_t> peakMemoryPerRank;
  // The evaluations' peaks in the epoch, max over ranks (-1: no evaluation, or not measured).
  std::int64_t evalPeakMemoryBytes = -1, evalPeakAllocatedBytes = -1;
  double commWaitS = 0;  // time blocked on gradient communication after backward (slowest rank)
  double gradNorm = 0;           // mean gradient L2 norm (before clipping) over the epoch's optimizer steps
  double lossScale = 1;          // fp16 loss scale at the end of the epoch (1 otherwise)
  std::int64_t skippedSteps = 0;  // optimizer steps skipped for inf/NaN gradients, since the start
  std::int64_t skippedImages = 0;  // bad image files replaced by other samples in this epoch (all ranks)
  std::int64_t hostDecodedImages = 0;  // data.decode: gpu: training images decoded on the CPU instead (all ranks)
  // The loader's workers on the epoch's training batches (BatchLoader's LoaderTimes, all ranks):
  // batches built, wall-clock and thread CPU seconds the data plugin took, seconds pinning them.
  std::int64_t loaderBatches = 0;
  double loaderBuildS = 0, loaderBuildCpuS = 0, loaderPinS = 0;
  std::optional<double> valTop1Ema;  // Top-1 of the EMA weights, when EMA is on
  std::int64_t commBytes = 0;        // bytes a rank passed to gradient allreduces in the epoch (max over ranks)
  double commBytesPerStep = 0;       // the same per optimizer step
  // What a rank holds between steps (max over ranks; distributed.shard divides them): the
  // parameters, the gradients, the optimizer's state; and the bytes a ring sends per rank and step
  // (an all-reduce 2(n-1)/n of its payload, a reduce-scatter or all-gather (n-1)/n).
  std::optional<std::int64_t> parametersBytes, gradientsBytes, optimizerBytes;
  std::optional<double> sentBytesPerStep;
  std::int64_t steps = 0;
  std::int64_t samples = 0;
  double flopsPerS = 0;  // achieved: counted training FLOPs per image x images/s (all ranks)
  double mfu = 0;        // flopsPerS / the peak FLOP/s of all ranks' devices (0: unknown; above 1: the
                         // peak is wrong — written as null with mfu_note, read back as +infinity)
  bool partial = false;  // the run stopped inside this epoch (a target reached)
  // Where the epoch's time went, per phase (the slowest rank's and the mean over ranks; evaluation
  // and checkpoint saves included); empty in files written before it was measured.
  EpochBreakdown breakdown;
};

// The breakdown as the result file holds it ("breakdown": clock, epoch_s, mean_epoch_s,
// comm_overlap, and parts.<phase>: max_s, mean_s, fraction); read back, throwing JsonFieldError.
nlohmann::json breakdownJson(const EpochBreakdown& b);
EpochBreakdown readBreakdown(const JsonFields& f);

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
};

// How a run batches (micro-batch x ranks x accumulation = global batch): what a checkpoint records
// so that a run resumed on another number of ranks can keep its global batch.
struct BatchShape {
  std::int64_t microBatch = 0, accumulate = 1, globalBatch = 0, stepsPerEpoch = 0;
  double lr = 0;  // scaled to the global batch
};

// A resumption on another number of ranks (runner/checkpoint/Checkpoint.h), as recorded.
struct WorldSizeChange {
  std::int64_t step = 0, epoch = 0, sample = 0;  // where (sample: position in the epoch's order)
  int fromWorld = 0, toWorld = 0;
  BatchShape from, to;
  bool forced = false;          // the global batch changed (--force)
  bool commStateReset = false;  // the comm hook's per-rank state (PowerSGD) started afresh
  std::string checkpoint;
};

// One model of a run's comparison of models (what its methods made of the model: the full-width
// model, the pruned one, the int8 one) — what each costs and how well it does, measured at the end
// of the run.
struct CompressedModel {
  std::string model;             // "fp32" (full width), "pruned fp32", "int8" / "pruned int8"
  std::int64_t params = 0;
  double flopsPerImage = 0;      // forward, counted (int8: the same multiply-adds as its float model)
  std::int64_t bytes = 0;        // its weights as exported (float32, or int8 with scales and zero points)
  double top1 = -1;              // test Top-1 (%); -1: not evaluated
  double imagesPerSB1 = 0, imagesPerSB64 = 0;  // inference (median of repeats); 0: not timed
};

// One attempt of the run: a start, and how it ended (a run resumed after a requeue, a preemption,
// a kill or a restart has several).
struct Attempt {
  int number = 1;              // 1, 2, ... in order
  std::string startedAt;       // UTC, ISO 8601
  std::int64_t fromStep = 0;   // the step it started from (0, or the checkpoint's)
  std::int64_t toStep = 0;     // the last step it completed (while running: the latest saved)
  double seconds = 0;          // its run clock, set-up included (while running: until the latest save)
  // "running", "completed", "interrupted" (Ctrl-C/SIGTERM), "requeued" (a Slurm signal: saved and
  // requeued), "cancelled" (scancel), "killed" (ended without a word: resumed from a checkpoint)
  std::string ended = "running";
  std::string slurmJob;        // SLURM_JOB_ID ("" outside Slurm)
};

// What the summary derives from the records.
struct ResultSummary {
  std::int64_t epochsCompleted = 0;  // epochs run to their end (a target may stop the run inside one)
  double bestValTop1 = 0, finalValTop1 = 0, totalTimeS = 0, meanEpochTimeS = 0;
  const EvalRecord* targetHit = nullptr;  // the first evaluation meeting the target
};

// The run's history: the records a resumed run continues. The result file is made of it (and more);
// a checkpoint keeps it as it stood at the save and gives it back on resume. Its fields are written
// and read by one table (runHistoryTable(), ResultFile.cpp) in both files: a new field is a member
// here and a row there.
struct RunHistory {
  std::vector<EpochRecord> epochs;
  std::vector<EvalRecord> evals;
  std::vector<WorldSizeChange> worldSizeChanges;
  std::vector<Attempt> attempts;
  std::string mlflowRunId;   // output.mlflow's run, continued by a resumed run ("" without MLflow)
  std::string mlflowRunKey;  // made at the first start with output.mlflow; the MLflow run's exprun.run_key tag
};

struct ResultFile : RunHistory {
  int schema = kResultSchema;
  std::string name;
  // "running", "completed", "interrupted", "requeued" or "cancelled" (the last attempt's end)
  std::string status = "running";
  nlohmann::json spec = nlohmann::json::object();        // the resolved spec (runner/spec/Spec.h's JSON)
  nlohmann::json provenance = nlohmann::json::object();  // runner/train/Provenance.h
  std::vector<CompressedModel> compression;  // the comparison of models ("compression")
  // Each method's own section by type (runner/api/Method.h: its figures()); empty: none.
  nlohmann::json methods = nlohmann::json::object();
  // train.profile's findings (runner/train/Profile.h): the window, the trace's file name, the
  // memory timeline of one step and the per-module table; empty: no profile.
  nlohmann::json profile = nlohmann::json::object();
  Target target;

  // The first evaluation meeting the target, if any.
  const EvalRecord* targetReached() const;
  ResultSummary summary() const;
  // Atomic write; throws FileError naming the path on failure.
  void write(const std::string& path) const;
};

// Each record's JSON fields, written once (runner/util/JsonTable.h): the file's writer and reader,
// and the checkpoint's meta.json (which keeps the records so far), all use these.
const JsonTable<EpochRecord>& epochRecordTable();
const JsonTable<EvalRecord>& evalRecordTable();
const JsonTable<BatchShape>& batchShapeTable();
const JsonTable<WorldSizeChange>& worldSizeChangeTable();
const JsonTable<Attempt>& attemptTable();
const JsonTable<CompressedModel>& compressedModelTable();
const JsonTable<RunHistory>& runHistoryTable();  // the result file's keys: epochs, evals, world_size_changes, ...

// The records read from a JSON object of the file (`f` knows its path for messages); throw
// JsonFieldError naming the field.
EpochRecord readEpochRecord(const JsonFields& f);
EvalRecord readEvalRecord(const JsonFields& f);
BatchShape readBatchShape(const JsonFields& f);
WorldSizeChange readWorldSizeChange(const JsonFields& f);
CompressedModel readCompressedModel(const JsonFields& f);

// JSON, as the file holds it. from_json throws JsonFieldError naming the field's path.
void to_json(nlohmann::json& j, const EpochRecord& e);
void from_json(const nlohmann::json& j, EpochRecord& e);
void to_json(nlohmann::json& j, const EvalRecord& e);
void from_json(const nlohmann::json& j, EvalRecord& e);
void to_json(nlohmann::json& j, const BatchShape& b);
void from_json(const nlohmann::json& j, BatchShape& b);
void to_json(nlohmann::json& j, const WorldSizeChange& c);
void from_json(const nlohmann::json& j, WorldSizeChange& c);
void to_json(nlohmann::json& j, const CompressedModel& m);
void to_json(nlohmann::json& j, const ResultFile& r);
void from_json(const nlohmann::json& j, ResultFile& r);  // also checks the schema and the status

// A result file read and checked: throws JsonFieldError "FILE: field: what" (or "FILE: invalid
// JSON: ..." / "FILE: cannot read result file: ...").
ResultFile readResultFile(const std::string& path);
ResultFile resultFileFromText(const std::string& text, const std::string& file);

// MFU as it is shown: "12.3 %", "—" when unknown (≤ 0), and "> 100 % (peak unknown)" above 1 —
// a figure above the peak means the peak is wrong for the device, not a measurement.
std::string formatMfu(double mfu);
extern const char* const kMfuAbovePeak;  // "> 100 % (peak unknown)"

}  // namespace exprun
