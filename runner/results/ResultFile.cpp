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

namespace exprun {

EpochRecord readEpochRecord(const JsonFields& f) {
  EpochRecord e;
  e.epoch = f.integer("epoch");
  e.timeS = f.number("time_s");
  e.imagesPerS = f.number("images_per_s");
  e.dataWaitS = f.number("data_wait_s");
  e.trainLoss = f.number("train_loss");
  e.trainTop1 = f.number("train_top1");
  e.valLoss = f.number("val_loss");
  e.valTop1 = f.number("val_top1");
  e.valTop5 = f.number("val_top5");
  e.lr = f.number("lr");
  e.peakMemoryBytes = f.integer("peak_memory_bytes");
  e.peakMemoryPerRank = f.integers("peak_memory_bytes_per_rank");
  e.commWaitS = f.numberOr("comm_wait_s", 0.0);  // the rest: fields added after schema 1 began
  e.steps = f.integerOr("steps", 0);
  e.gradNorm = f.numberOr("grad_norm", 0.0);
  e.lossScale = f.numberOr("loss_scale", 1.0);
  e.skippedSteps = f.integerOr("skipped_steps", 0);
  e.skippedImages = f.integerOr("skipped_images", 0);
  if (f.has("val_top1_ema")) e.valTop1Ema = f.number("val_top1_ema");
  e.samples = f.integerOr("samples", 0);
  e.commBytes = f.integerOr("comm_bytes", 0);
  e.commBytesPerStep = f.numberOr("comm_bytes_per_step", 0.0);
  e.flopsPerS = f.numberOr("flops_per_s", 0.0);
  e.mfu = f.numberOr("mfu", 0.0);
  if (f.has("mfu_note")) e.mfu = std::numeric_limits<double>::infinity();  // above the peak
  e.partial = f.booleanOr("partial", false);
  e.peakAllocatedBytes = f.integerOr("peak_allocated_bytes", -1);
  e.evalPeakMemoryBytes = f.integerOr("eval_peak_memory_bytes", -1);
  e.evalPeakAllocatedBytes = f.integerOr("eval_peak_allocated_bytes", -1);
  return e;
}

EvalRecord readEvalRecord(const JsonFields& f) {
  return EvalRecord{f.integer("step"),       f.integer("epoch"),    f.number("time_s"),
                    f.number("val_loss"),    f.number("val_top1"), f.number("val_top5")};
}

BatchShape readBatchShape(const JsonFields& f) {
  BatchShape b;
  b.microBatch = f.integer("micro_batch");
  b.accumulate = f.integer("accumulate");
  b.globalBatch = f.integer("global_batch");
  b.stepsPerEpoch = f.integerOr("steps_per_epoch", 0);
  b.lr = f.numberOr("lr", 0.0);
  return b;
}

WorldSizeChange readWorldSizeChange(const JsonFields& f) {
  WorldSizeChange c;
  c.step = f.integer("step");
  c.epoch = f.integer("epoch");
  c.sample = f.integer("sample");
  const JsonFields from = f.object("from"), to = f.object("to");
  c.fromWorld = static_cast<int>(from.integer("world_size"));
  c.toWorld = static_cast<int>(to.integer("world_size"));
  c.from = readBatchShape(from);
  c.to = readBatchShape(to);
  c.forced = f.boolean("global_batch_changed");
  c.commStateReset = f.boolean("comm_state_reset");
  c.checkpoint = f.text("checkpoint");
  return c;
}

namespace {

using nlohmann::json;

Target readTarget(const JsonFields& f) {
  for (const auto& [key, v] : f.json().items())
    if (!v.is_number()) f.fail(key, "expected a number, got " + describeJson(v));
  return Target{f.numberOr("val_top1", 0.0), f.numberOr("val_top5", 0.0), f.numberOr("val_loss", 0.0)};
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

ResultFile readResult(const JsonFields& f) {
  ResultFile r;
  r.schema = static_cast<int>(f.integer("schema"));
  if (r.schema != kResultSchema)
    f.fail("schema", "unsupported result schema " + std::to_string(r.schema) + " (this exprun reads schema " +
                         std::to_string(kResultSchema) + ")");
  r.name = f.text("name");
  r.status = f.text("status");
  if (r.status != "completed" && r.status != "interrupted" && r.status != "running")
    f.fail("status", "expected completed, interrupted or running, got '" + r.status + "'");
  if (f.has("spec")) r.spec = f.at("spec");
  r.provenance = f.object("provenance").json();
  for (const auto& e : f.objects("epochs", "an epoch object", true)) r.epochs.push_back(readEpochRecord(e));
  for (const auto& e : f.objects("evals", "an evaluation object", false)) r.evals.push_back(readEvalRecord(e));
  for (const auto& c : f.objects("world_size_changes", "a change object", false))
    r.worldSizeChanges.push_back(readWorldSizeChange(c));
  for (const auto& p : f.objects("prune_steps", "a pruning step object", false)) r.prunes.push_back(readPruneRecord(p));
  for (const auto& m : f.objects("compression", "a compressed model object", false))
    r.compression.push_back(readCompressedModel(m));
  if (f.has("summary")) {
    const JsonFields summary = f.object("summary");
    if (summary.has("target")) r.target = readTarget(summary.object("target"));
  }
  return r;
}

}  // namespace

void to_json(json& j, const EpochRecord& e) {
  j = json{{"epoch", e.epoch},
           {"time_s", e.timeS},
           {"images_per_s", e.imagesPerS},
           {"data_wait_s", e.dataWaitS},
           {"train_loss", e.trainLoss},
           {"train_top1", e.trainTop1},
           {"val_loss", e.valLoss},
           {"val_top1", e.valTop1},
           {"val_top5", e.valTop5},
           {"lr", e.lr},
           {"peak_memory_bytes", e.peakMemoryBytes},
           {"peak_memory_bytes_per_rank", e.peakMemoryPerRank},
           {"comm_wait_s", e.commWaitS},
           {"steps", e.steps},
           {"samples", e.samples},
           {"grad_norm", e.gradNorm},
           {"loss_scale", e.lossScale},
           {"skipped_steps", e.skippedSteps},
           {"skipped_images", e.skippedImages},
           {"comm_bytes", e.commBytes},
           {"comm_bytes_per_step", e.commBytesPerStep},
           {"flops_per_s", e.flopsPerS},
           {"mfu", e.mfu}};
  if (e.mfu > 1) j["mfu"] = nullptr, j["mfu_note"] = kMfuAbovePeak;
  if (e.valTop1Ema) j["val_top1_ema"] = *e.valTop1Ema;
  if (e.partial) j["partial"] = true;
  if (e.peakAllocatedBytes >= 0) j["peak_allocated_bytes"] = e.peakAllocatedBytes;
  if (e.evalPeakMemoryBytes >= 0) j["eval_peak_memory_bytes"] = e.evalPeakMemoryBytes;
  if (e.evalPeakAllocatedBytes >= 0) j["eval_peak_allocated_bytes"] = e.evalPeakAllocatedBytes;
}
const char* const kMfuAbovePeak = "> 100 % (peak unknown)";

std::string formatMfu(double mfu) {
  if (!(mfu > 0)) return "—";
  if (mfu > 1) return kMfuAbovePeak;
  return strf("%.1f %%", 100 * mfu);
}

void from_json(const json& j, EpochRecord& e) { e = readEpochRecord(JsonFields(j, "", "an epoch object")); }

void to_json(json& j, const EvalRecord& e) {
  j = json{{"step", e.step},          {"epoch", e.epoch},       {"time_s", e.timeS},
           {"val_loss", e.valLoss}, {"val_top1", e.valTop1}, {"val_top5", e.valTop5}};
}
void from_json(const json& j, EvalRecord& e) { e = readEvalRecord(JsonFields(j, "", "an evaluation object")); }

void to_json(json& j, const BatchShape& b) {
  j = json{{"micro_batch", b.microBatch},
           {"accumulate", b.accumulate},
           {"global_batch", b.globalBatch},
           {"steps_per_epoch", b.stepsPerEpoch},
           {"lr", b.lr}};
}
void from_json(const json& j, BatchShape& b) { b = readBatchShape(JsonFields(j, "", "a batching object")); }

void to_json(json& j, const WorldSizeChange& c) {
  json from = c.from, to = c.to;
  from["world_size"] = c.fromWorld;
  to["world_size"] = c.toWorld;
  j = json{{"step", c.step},
           {"epoch", c.epoch},
           {"sample", c.sample},
           {"from", from},
           {"to", to},
           {"global_batch_changed", c.forced},
           {"comm_state_reset", c.commStateReset},
           {"checkpoint", c.checkpoint}};
}
void from_json(const json& j, WorldSizeChange& c) { c = readWorldSizeChange(JsonFields(j, "", "a change object")); }

void to_json(json& j, const ResultFile& r) {
  j = json{{"schema", r.schema},         {"name", r.name},           {"status", r.status},
           {"spec", r.spec},             {"provenance", r.provenance}, {"epochs", r.epochs},
           {"evals", r.evals},           {"summary", summaryJson(r)}};
  if (!r.worldSizeChanges.empty()) j["world_size_changes"] = r.worldSizeChanges;
  if (!r.prunes.empty()) j["prune_steps"] = r.prunes;
  if (!r.compression.empty()) j["compression"] = r.compression;
}

void to_json(json& j, const PruneRecord& p) {
  j = json{{"step", p.step},
           {"steps", p.steps},
           {"epoch", p.epoch},
           {"ratio", p.ratio},
           {"params_before", p.paramsBefore},
           {"params_after", p.paramsAfter},
           {"flops_before", p.flopsBefore},
           {"flops_after", p.flopsAfter},
           {"top1_before", p.top1Before},
           {"top1_after", p.top1After},
           {"widths", p.widths}};
}

PruneRecord readPruneRecord(const JsonFields& f) {
  PruneRecord p;
  p.step = static_cast<int>(f.integer("step"));
  p.steps = static_cast<int>(f.integer("steps"));
  p.epoch = f.integer("epoch");
  p.ratio = f.number("ratio");
  p.paramsBefore = f.integer("params_before");
  p.paramsAfter = f.integer("params_after");
  p.flopsBefore = f.number("flops_before");
  p.flopsAfter = f.number("flops_after");
  p.top1Before = f.numberOr("top1_before", -1);
  p.top1After = f.numberOr("top1_after", -1);
  p.widths = f.integerMap("widths");
  return p;
}

void to_json(json& j, const CompressedModel& m) {
  j = json{{"model", m.model},
           {"params", m.params},
           {"flops_per_image", m.flopsPerImage},
           {"bytes", m.bytes},
           {"top1", m.top1},
           {"images_per_s_batch1", m.imagesPerSB1},
           {"images_per_s_batch64", m.imagesPerSB64}};
}

CompressedModel readCompressedModel(const JsonFields& f) {
  CompressedModel m;
  m.model = f.text("model");
  m.params = f.integer("params");
  m.flopsPerImage = f.number("flops_per_image");
  m.bytes = f.integer("bytes");
  m.top1 = f.numberOr("top1", -1);
  m.imagesPerSB1 = f.numberOr("images_per_s_batch1", 0);
  m.imagesPerSB64 = f.numberOr("images_per_s_batch64", 0);
  return m;
}
void from_json(const json& j, ResultFile& r) { r = readResult(JsonFields(j, "", "a result object")); }

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
    return readResult(JsonFields(j, "", "a result object"));
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
