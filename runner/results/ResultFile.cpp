// Purpose: the result file's JSON, written atomically and read back checked (see ResultFile.h).
#include "runner/results/ResultFile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "runner/util/AtomicFile.h"
#include "runner/util/Format.h"
#include "runner/util/JsonFields.h"
#include "runner/util/JsonTable.h"

namespace exprun {

namespace {

using nlohmann::json;
using namespace jsonf;

// MFU above 1 means the peak is wrong: written as null with mfu_note, read back as +infinity.
JsonField<EpochRecord> mfuField() {
  return custom<EpochRecord>(
      "mfu",
      [](json& j, const EpochRecord& e) {
        j["mfu"] = e.mfu;
        if (e.mfu > 1) j["mfu"] = nullptr, j["mfu_note"] = kMfuAbovePeak;
      },
      [](EpochRecord& e, const JsonFields& f) {
        e.mfu = f.numberOr("mfu", 0.0);
        if (f.has("mfu_note")) e.mfu = std::numeric_limits<double>::infinity();
      });
}

// A change's world sizes sit inside its batch shapes ("from": {..., "world_size": 2}).
JsonField<WorldSizeChange> shapeField(const char* key, BatchShape WorldSizeChange::*shape, int WorldSizeChange::*world) {
  return custom<WorldSizeChange>(
      key,
      [=](json& j, const WorldSizeChange& c) {
        json b = batchShapeTable().write(c.*shape);
        b["world_size"] = c.*world;
        j[key] = b;
      },
      [=](WorldSizeChange& c, const JsonFields& f) {
        const JsonFields b = f.object(key);
        c.*world = static_cast<int>(b.integer("world_size"));
        c.*shape = batchShapeTable().read(b);
      });
}

Target readTarget(const JsonFields& f) {
  for (const auto& [key, v] : f.json().items())
    if (!v.is_number()) f.fail(key, "expected a number, got " + describeJson(v));
  return Target{f.numberOr("val_top1", 0.0), f.numberOr("val_top5", 0.0), f.numberOr("val_loss", 0.0)};
}

JsonField<EpochRecord> breakdownField() {
  return custom<EpochRecord>(
      "breakdown",
      [](json& j, const EpochRecord& e) {
        if (!e.breakdown.empty()) j["breakdown"] = breakdownJson(e.breakdown);
      },
      [](EpochRecord& e, const JsonFields& f) {
        if (f.has("breakdown")) e.breakdown = readBreakdown(f.object("breakdown"));
      });
}

json targetJson(const Target& t) {
  json j = json::object();
  if (t.top1 > 0) j["val_top1"] = t.top1;
  if (t.top5 > 0) j["val_top5"] = t.top5;
  if (t.valLoss > 0) j["val_loss"] = t.valLoss;
  return j;
}

json summaryJson(const ResultFile& r) {
  const ResultSummary s = r.summary();
  json j{{"epochs_completed", s.epochsCompleted},
         {"best_val_top1", s.bestValTop1},
         {"final_val_top1", s.finalValTop1},
         {"total_time_s", s.totalTimeS},
         {"mean_epoch_time_s", s.meanEpochTimeS}};
  if (r.target.any()) {
    const EvalRecord* hit = s.targetHit;
    j["target"] = targetJson(r.target);
    j["time_to_target_s"] = hit ? json(hit->timeS) : json(nullptr);
    j["target_epoch"] = hit ? json(hit->epoch) : json(nullptr);
    j["target_step"] = hit ? json(hit->step) : json(nullptr);
  }
  return j;
}

}  // namespace

const JsonTable<RunHistory>& runHistoryTable() {
  using H = RunHistory;
  static const JsonTable<H> table{{
      list("epochs", &H::epochs, epochRecordTable(), "an epoch object", Presence::Required),
      list("evals", &H::evals, evalRecordTable(), "an evaluation object", Presence::Optional),
      list("world_size_changes", &H::worldSizeChanges, worldSizeChangeTable(), "a change object",
           Presence::OmittedWhenEmpty),
      list("attempts", &H::attempts, attemptTable(), "an attempt object", Presence::OmittedWhenEmpty),
      unlessEqual("mlflow_run_id", &H::mlflowRunId, std::string()),
      unlessEqual("mlflow_run_key", &H::mlflowRunKey, std::string()),
  }};
  return table;
}

namespace {

// The result file's own fields: the schema and status checked, the summary derived (only its
// target is read back).
const JsonTable<ResultFile>& resultTable() {
  using R = ResultFile;
  static const JsonTable<R> table{{
      custom<R>(
          "schema", [](json& j, const R& r) { j["schema"] = r.schema; },
          [](R& r, const JsonFields& f) {
            r.schema = static_cast<int>(f.integer("schema"));
            if (r.schema != kResultSchema)
              f.fail("schema", "unsupported result schema " + std::to_string(r.schema) + " (this exprun reads schema " +
                                   std::to_string(kResultSchema) + ")");
          }),
      required("name", &R::name),
      custom<R>(
          "status", [](json& j, const R& r) { j["status"] = r.status; },
          [](R& r, const JsonFields& f) {
            r.status = f.text("status");
            if (r.status != "completed" && r.status != "interrupted" && r.status != "running" &&
                r.status != "requeued" && r.status != "cancelled")
              f.fail("status", "expected completed, interrupted, requeued, cancelled or running, got '" + r.status + "'");
          }),
      custom<R>(
          "spec", [](json& j, const R& r) { j["spec"] = r.spec; },
          [](R& r, const JsonFields& f) {
            if (f.has("spec")) r.spec = f.at("spec");
          }),
      custom<R>(
          "provenance", [](json& j, const R& r) { j["provenance"] = r.provenance; },
          [](R& r, const JsonFields& f) { r.provenance = f.object("provenance").json(); }),
      custom<R>(
          "history", [](json& j, const R& r) { j.update(runHistoryTable().write(r)); },
          [](R& r, const JsonFields& f) { runHistoryTable().readInto(r, f); }),
      list("compression", &R::compression, compressedModelTable(), "a compressed model object",
           Presence::OmittedWhenEmpty),
      custom<R>(
          "methods",
          [](json& j, const R& r) {
            if (!r.methods.empty()) j["methods"] = r.methods;
          },
          [](R& r, const JsonFields& f) { r.methods = f.has("methods") ? f.object("methods").json() : json::object(); }),
      custom<R>(
          "profile",
          [](json& j, const R& r) {
            if (!r.profile.empty()) j["profile"] = r.profile;
          },
          [](R& r, const JsonFields& f) { r.profile = f.has("profile") ? f.object("profile").json() : json::object(); }),
      custom<R>(
          "summary", [](json& j, const R& r) { j["summary"] = summaryJson(r); },
          [](R& r, const JsonFields& f) {
            if (!f.has("summary")) return;
            const JsonFields summary = f.object("summary");
            if (summary.has("target")) r.target = readTarget(summary.object("target"));
          }),
  }};
  return table;
}

}  // namespace

json breakdownJson(const EpochBreakdown& b) {
  json parts = json::object();
  for (std::size_t i = 0; i < kPhases; ++i) {
    const Phase p = phaseAt(i);
    json part{{"max_s", b.max[i]}, {"mean_s", b.mean[i]}, {"fraction", b.fraction(p)}};
    if (p == Phase::Recompute) part["inside"] = "backward";  // counted in backward's figures too
    parts[phaseKey(p)] = std::move(part);
  }
  json j{{"clock", b.clock}, {"epoch_s", b.epochS}, {"mean_epoch_s", b.meanEpochS}, {"parts", std::move(parts)}};
  if (b.commOverlap) j["comm_overlap"] = *b.commOverlap;
  return j;
}

EpochBreakdown readBreakdown(const JsonFields& f) {
  EpochBreakdown b;
  b.clock = f.text("clock");
  b.epochS = f.number("epoch_s");
  b.meanEpochS = f.number("mean_epoch_s");
  const JsonFields parts = f.object("parts");
  for (std::size_t i = 0; i < kPhases; ++i) {
    const char* key = phaseKey(phaseAt(i));
    if (!parts.has(key)) continue;  // a phase added later: zero
    const JsonFields part = parts.object(key);
    b.max[i] = part.number("max_s");
    b.mean[i] = part.number("mean_s");
  }
  if (f.has("comm_overlap")) b.commOverlap = f.number("comm_overlap");
  return b;
}

const JsonTable<EpochRecord>& epochRecordTable() {
  using E = EpochRecord;
  static const JsonTable<E> table{{
      required("epoch", &E::epoch),
      required("time_s", &E::timeS),
      unlessEqual("images_per_s", &E::imagesPerS, 0.0),  // absent where the units are tokens
      required("data_wait_s", &E::dataWaitS),
      required("train_loss", &E::trainLoss),
      required("train_top1", &E::trainTop1),
      required("val_loss", &E::valLoss),
      required("val_top1", &E::valTop1),
      required("val_top5", &E::valTop5),
      required("lr", &E::lr),
      required("peak_memory_bytes", &E::peakMemoryBytes),
      // the rest: fields added after schema 1 began
      optional("peak_memory_bytes_per_rank", &E::peakMemoryPerRank, {}),
      optional("comm_wait_s", &E::commWaitS, 0.0),
      optional("steps", &E::steps, std::int64_t{0}),
      optional("samples", &E::samples, std::int64_t{0}),
      optional("grad_norm", &E::gradNorm, 0.0),
      optional("loss_scale", &E::lossScale, 1.0),
      optional("skipped_steps", &E::skippedSteps, std::int64_t{0}),
      optional("skipped_images", &E::skippedImages, std::int64_t{0}),
      optional("host_decoded_images", &E::hostDecodedImages, std::int64_t{0}),
      optional("loader_batches", &E::loaderBatches, std::int64_t{0}),
      optional("loader_build_s", &E::loaderBuildS, 0.0),
      optional("loader_build_cpu_s", &E::loaderBuildCpuS, 0.0),
      optional("loader_pin_s", &E::loaderPinS, 0.0),
      optional("comm_bytes", &E::commBytes, std::int64_t{0}),
      optional("comm_bytes_per_step", &E::commBytesPerStep, 0.0),
      optional("flops_per_s", &E::flopsPerS, 0.0),
      mfuField(),
      breakdownField(),
      ifSet("val_top1_ema", &E::valTop1Ema),
      ifSet("tokens_per_s", &E::tokensPerS),
      ifSet("val_perplexity", &E::valPerplexity),
      ifSet("parameters_bytes", &E::parametersBytes),
      ifSet("gradients_bytes", &E::gradientsBytes),
      ifSet("optimizer_bytes", &E::optimizerBytes),
      ifSet("sent_bytes_per_step", &E::sentBytesPerStep),
      unlessEqual("partial", &E::partial, false),
      unlessEqual("peak_allocated_bytes", &E::peakAllocatedBytes, std::int64_t{-1}),
      unlessEqual("eval_peak_memory_bytes", &E::evalPeakMemoryBytes, std::int64_t{-1}),
      unlessEqual("eval_peak_allocated_bytes", &E::evalPeakAllocatedBytes, std::int64_t{-1}),
  }};
  return table;
}

const JsonTable<EvalRecord>& evalRecordTable() {
  using E = EvalRecord;
  static const JsonTable<E> table{{
      required("step", &E::step),
      required("epoch", &E::epoch),
      required("time_s", &E::timeS),
      required("val_loss", &E::valLoss),
      required("val_top1", &E::valTop1),
      required("val_top5", &E::valTop5),
  }};
  return table;
}

const JsonTable<BatchShape>& batchShapeTable() {
  using B = BatchShape;
  static const JsonTable<B> table{{
      required("micro_batch", &B::microBatch),
      required("accumulate", &B::accumulate),
      required("global_batch", &B::globalBatch),
      optional("steps_per_epoch", &B::stepsPerEpoch, std::int64_t{0}),
      optional("lr", &B::lr, 0.0),
  }};
  return table;
}

const JsonTable<WorldSizeChange>& worldSizeChangeTable() {
  using C = WorldSizeChange;
  static const JsonTable<C> table{{
      required("step", &C::step),
      required("epoch", &C::epoch),
      required("sample", &C::sample),
      shapeField("from", &C::from, &C::fromWorld),
      shapeField("to", &C::to, &C::toWorld),
      required("global_batch_changed", &C::forced),
      required("comm_state_reset", &C::commStateReset),
      required("checkpoint", &C::checkpoint),
  }};
  return table;
}

const JsonTable<Attempt>& attemptTable() {
  using A = Attempt;
  static const JsonTable<A> table{{
      required("attempt", &A::number),
      required("started_at", &A::startedAt),
      required("from_step", &A::fromStep),
      required("to_step", &A::toStep),
      required("seconds", &A::seconds),
      required("ended", &A::ended),
      optional("slurm_job", &A::slurmJob, std::string()),
  }};
  return table;
}

const JsonTable<CompressedModel>& compressedModelTable() {
  using M = CompressedModel;
  static const JsonTable<M> table{{
      required("model", &M::model),
      required("params", &M::params),
      required("flops_per_image", &M::flopsPerImage),
      required("bytes", &M::bytes),
      optional("top1", &M::top1, -1.0),
      optional("images_per_s_batch1", &M::imagesPerSB1, 0.0),
      optional("images_per_s_batch64", &M::imagesPerSB64, 0.0),
  }};
  return table;
}

EpochRecord readEpochRecord(const JsonFields& f) { return epochRecordTable().read(f); }
EvalRecord readEvalRecord(const JsonFields& f) { return evalRecordTable().read(f); }
BatchShape readBatchShape(const JsonFields& f) { return batchShapeTable().read(f); }
WorldSizeChange readWorldSizeChange(const JsonFields& f) { return worldSizeChangeTable().read(f); }
CompressedModel readCompressedModel(const JsonFields& f) { return compressedModelTable().read(f); }

void to_json(json& j, const EpochRecord& e) { j = epochRecordTable().write(e); }
void from_json(const json& j, EpochRecord& e) { e = readEpochRecord(JsonFields(j, "", "an epoch object")); }
void to_json(json& j, const EvalRecord& e) { j = evalRecordTable().write(e); }
void from_json(const json& j, EvalRecord& e) { e = readEvalRecord(JsonFields(j, "", "an evaluation object")); }
void to_json(json& j, const BatchShape& b) { j = batchShapeTable().write(b); }
void from_json(const json& j, BatchShape& b) { b = readBatchShape(JsonFields(j, "", "a batching object")); }
void to_json(json& j, const WorldSizeChange& c) { j = worldSizeChangeTable().write(c); }
void from_json(const json& j, WorldSizeChange& c) { c = readWorldSizeChange(JsonFields(j, "", "a change object")); }
void to_json(json& j, const CompressedModel& m) { j = compressedModelTable().write(m); }
void to_json(json& j, const ResultFile& r) { j = resultTable().write(r); }
void from_json(const json& j, ResultFile& r) { r = resultTable().read(JsonFields(j, "", "a result object")); }

const char* const kMfuAbovePeak = "> 100 % (peak unknown)";

std::string formatMfu(double mfu) {
  if (!(mfu > 0)) return "—";
  if (mfu > 1) return kMfuAbovePeak;
  return strf("%.1f %%", 100 * mfu);
}

const EvalRecord* ResultFile::targetReached() const {
  for (const auto& e : evals)
    if (target.met(e)) return &e;
  return nullptr;
}

ResultSummary ResultFile::summary() const {
  ResultSummary s;
  double fullTotal = 0;
  for (const auto& e : epochs) {
    s.bestValTop1 = std::max(s.bestValTop1, e.valTop1);
    s.totalTimeS += e.timeS;
    if (!e.partial) fullTotal += e.timeS, ++s.epochsCompleted;
  }
  for (const auto& e : evals) s.bestValTop1 = std::max(s.bestValTop1, e.valTop1);
  s.finalValTop1 = epochs.empty() ? 0.0 : epochs.back().valTop1;
  s.meanEpochTimeS = s.epochsCompleted == 0 ? 0.0 : fullTotal / static_cast<double>(s.epochsCompleted);
  s.targetHit = target.any() ? targetReached() : nullptr;
  return s;
}

void ResultFile::write(const std::string& path) const {
  writeFileAtomically(path, json(*this).dump(2) + "\n", FileFaults{"result-write"});
}

ResultFile resultFileFromText(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    std::string msg = e.what();
    if (auto pos = msg.find("] "); pos != std::string::npos) msg = msg.substr(pos + 2);
    throw JsonFieldError(file + ": invalid JSON: " + msg + " (byte " + std::to_string(e.byte) + ")");
  }
  try {
    return resultTable().read(JsonFields(j, "", "a result object"));
  } catch (const JsonFieldError& e) {
    throw JsonFieldError(file + ": " + e.what());
  }
}

ResultFile readResultFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw JsonFieldError(path + ": cannot read result file: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return resultFileFromText(text.str(), path);
}

}  // namespace exprun
