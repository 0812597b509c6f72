// Purpose: result files → comparison table (see Report.h): reading and checking the files, the
// baseline and provenance comparison, and the Markdown, CSV and JSON renderings.
#include "runner/report/Report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "runner/util/ExitCodes.h"
#include "runner/util/Log.h"
#include "runner/results/ResultFile.h"
#include "runner/util/AtomicFile.h"

namespace exprun {
namespace {

using nlohmann::json;

[[noreturn]] void bad(const std::string& file, const std::string& field, const std::string& what) {
  throw ReportError(file + ": " + field + ": " + what);
}

std::string describe(const json& v) {
  std::string text = v.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + text;
}

const json& field(const json& obj, const std::string& key, const std::string& file, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) bad(file, path, "missing required field");
  return *it;
}

double number(const json& obj, const std::string& key, const std::string& file, const std::string& path) {
  const json& v = field(obj, key, file, path);
  if (!v.is_number()) bad(file, path, "expected a number, got " + describe(v));
  double x = v.get<double>();
  if (!std::isfinite(x)) bad(file, path, "expected a finite number");
  return x;
}

std::int64_t integer(const json& obj, const std::string& key, const std::string& file, const std::string& path) {
  const json& v = field(obj, key, file, path);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() && std::isfinite(v.get<double>()))
    return static_cast<std::int64_t>(v.get<double>());
  bad(file, path, "expected an integer, got " + describe(v));
}

std::string text(const json& obj, const std::string& key, const std::string& file, const std::string& path) {
  const json& v = field(obj, key, file, path);
  if (!v.is_string()) bad(file, path, "expected a string, got " + describe(v));
  return v.get<std::string>();
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError(path + ": cannot read result file: " + std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string opt(const std::optional<double>& v, const char* fmt) { return v ? strf(fmt, *v) : "—"; }

// A number as JSON writes it (shortest text that reads back exactly); empty for none.
std::string raw(const std::optional<double>& v) { return v ? json(*v).dump() : ""; }
std::string raw(const std::optional<std::int64_t>& v) { return v ? std::to_string(*v) : ""; }

std::string csvCell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string mdCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else if (c == '<')
      out += "&lt;";
    else
      out += c;
  }
  return out;
}

std::string joinStrings(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

const std::vector<std::string>& comparedProvenanceFields() {
  static const std::vector<std::string> fields{"host", "cpu_model", "cores", "device", "libtorch_version"};
  return fields;
}

RunSummary runSummaryFromText(const std::string& textIn, const std::string& file) {
  json j;
  try {
    j = json::parse(textIn);
  } catch (const json::parse_error& e) {
    std::string msg = e.what();
    auto pos = msg.find("] ");
    if (pos != std::string::npos) msg = msg.substr(pos + 2);
    throw ReportError(file + ": invalid JSON: " + msg + " (byte " + std::to_string(e.byte) + ")");
  }
  if (!j.is_object()) bad(file, "(top level)", "expected a result object, got " + describe(j));
  const std::int64_t schema = integer(j, "schema", file, "schema");
  if (schema != kResultSchema)
    bad(file, "schema",
        "unsupported result schema " + std::to_string(schema) + " (this exprun reads schema " +
            std::to_string(kResultSchema) + ")");
  RunSummary r;
  r.file = file;
  r.name = text(j, "name", file, "name");
  if (r.name.empty()) bad(file, "name", "empty run name");
  r.status = text(j, "status", file, "status");
  if (r.status != "completed" && r.status != "interrupted" && r.status != "running")
    bad(file, "status", "expected completed, interrupted or running, got '" + r.status + "'");

  const json& prov = field(j, "provenance", file, "provenance");
  if (!prov.is_object()) bad(file, "provenance", "expected an object, got " + describe(prov));
  r.worldSize = integer(prov, "world_size", file, "provenance.world_size");
  r.globalBatch = integer(prov, "global_batch", file, "provenance.global_batch");
  if (prov.contains("precision")) {
    r.precision = text(prov, "precision", file, "provenance.precision");
  } else if (j.contains("spec") && j["spec"].is_object() && j["spec"].contains("train") &&
             j["spec"]["train"].is_object() && j["spec"]["train"].contains("precision")) {
    r.precision = text(j["spec"]["train"], "precision", file, "spec.train.precision");
  }
  for (const auto& key : comparedProvenanceFields()) {
    auto it = prov.find(key);
    std::string value = it == prov.end() || it->is_null() ? "unknown"
                        : it->is_string()                 ? it->get<std::string>()
                                                          : it->dump();
    r.provenance.emplace_back(key, value);
  }

  const json& epochs = field(j, "epochs", file, "epochs");
  if (!epochs.is_array()) bad(file, "epochs", "expected an array, got " + describe(epochs));
  double timeSum = 0, imagesSum = 0, mfuSum = 0;
  std::size_t full = 0, withMfu = 0;  // epochs run to their end; those of them recording MFU
  for (std::size_t i = 0; i < epochs.size(); ++i) {
    const std::string at = "epochs[" + std::to_string(i) + "]";
    const json& e = epochs[i];
    if (!e.is_object()) bad(file, at, "expected an epoch object, got " + describe(e));
    const double t = number(e, "time_s", file, at + ".time_s");
    if (t < 0) bad(file, at + ".time_s", "negative time " + json(t).dump());
    const double images = number(e, "images_per_s", file, at + ".images_per_s");
    if (!e.value("partial", false)) {  // an epoch a target stopped inside is left out of the means
      timeSum += t;
      imagesSum += images;
      ++full;
      if (e.contains("mfu") && number(e, "mfu", file, at + ".mfu") > 0) mfuSum += e["mfu"].get<double>(), ++withMfu;
    }
    const std::int64_t mem = integer(e, "peak_memory_bytes", file, at + ".peak_memory_bytes");
    r.peakMemoryBytes = std::max(r.peakMemoryBytes.value_or(0), mem);
    if (e.contains("peak_allocated_bytes")) {
      const std::int64_t allocated = integer(e, "peak_allocated_bytes", file, at + ".peak_allocated_bytes");
      if (allocated >= 0) r.peakAllocatedBytes = std::max(r.peakAllocatedBytes.value_or(0), allocated);
    }
    const double top1 = number(e, "val_top1", file, at + ".val_top1");
    r.valTop1PerEpoch.push_back(top1);
    // A diverged run (train.on_nonfinite: skip) writes its NaN loss as null.
    r.trainLossPerEpoch.push_back(e.contains("train_loss") && e["train_loss"].is_null()
                                      ? NAN
                                      : number(e, "train_loss", file, at + ".train_loss"));
    r.bestTop1 = std::max(r.bestTop1.value_or(top1), top1);
    r.finalTop1 = top1;
  }
  r.epochsCompleted = static_cast<std::int64_t>(full);
  if (full > 0) {
    r.meanEpochTimeS = timeSum / full;
    r.imagesPerS = imagesSum / full;
  }
  if (withMfu > 0) r.mfu = mfuSum / withMfu;
  if (auto it = j.find("evals"); it != j.end()) {
    if (!it->is_array()) bad(file, "evals", "expected an array, got " + describe(*it));
    for (std::size_t i = 0; i < it->size(); ++i) {
      const std::string at = "evals[" + std::to_string(i) + "]";
      if (!(*it)[i].is_object()) bad(file, at, "expected an evaluation object, got " + describe((*it)[i]));
      r.evalTimeS.push_back(number((*it)[i], "time_s", file, at + ".time_s"));
      r.evalTop1.push_back(number((*it)[i], "val_top1", file, at + ".val_top1"));
      r.bestTop1 = std::max(r.bestTop1.value_or(r.evalTop1.back()), r.evalTop1.back());
    }
  }
  if (auto sm = j.find("summary"); sm != j.end() && sm->is_object() && sm->contains("target")) {
    const json& t = (*sm)["target"];
    if (!t.is_object()) bad(file, "summary.target", "expected an object, got " + describe(t));
    for (const auto& [k, v] : t.items()) {
      if (!v.is_number()) bad(file, "summary.target." + k, "expected a number, got " + describe(v));
      r.target += (r.target.empty() ? "" : ", ") + k + (k == "val_loss" ? " <= " : " >= ") + json(v).dump();
    }
    const json& hit = sm->value("time_to_target_s", json(nullptr));
    if (!hit.is_null()) r.timeToTargetS = number(*sm, "time_to_target_s", file, "summary.time_to_target_s");
  }
  return r;
}

RunSummary loadRunSummary(const std::string& path) { return runSummaryFromText(readFile(path), path); }

Report buildReport(std::vector<RunSummary> runs, const std::string& baselineName) {
  if (runs.empty()) throw ReportError("report: no result files given");
  Report rep;
  if (!baselineName.empty()) {
    auto it = std::find_if(runs.begin(), runs.end(), [&](const RunSummary& r) { return r.name == baselineName; });
    if (it == runs.end()) {
      std::vector<std::string> names;
      for (const auto& r : runs) names.push_back(r.name);
      throw ReportError("report: --baseline '" + baselineName +
                        "' is none of the runs; available: " + joinStrings(names, ", "));
    }
    rep.baseline = static_cast<std::size_t>(it - runs.begin());
  }
  const RunSummary& base = runs[rep.baseline];
  for (const auto& run : runs) {
    ReportRow row;
    row.run = run;
    if (base.meanEpochTimeS && run.meanEpochTimeS && *run.meanEpochTimeS > 0)
      row.speedup = *base.meanEpochTimeS / *run.meanEpochTimeS;
    for (std::size_t k = 0; k < run.provenance.size() && k < base.provenance.size(); ++k)
      if (run.provenance[k].second != base.provenance[k].second)
        row.differs.push_back(run.provenance[k].first + " " + base.provenance[k].second + " vs " +
                              run.provenance[k].second);
    rep.rows.push_back(std::move(row));
  }
  return rep;
}

Report buildReportFromFiles(const std::vector<std::string>& paths, const std::string& baselineName) {
  std::vector<RunSummary> runs;
  for (const auto& p : paths) runs.push_back(loadRunSummary(p));
  return buildReport(std::move(runs), baselineName);
}

const char* const kMemoryNote =
    "tensor memory: peak bytes of live tensors per process (CPU: exprun's tracking allocator; CUDA: the caching "
    "allocator's max allocated; max over epochs and ranks; the process's peak resident set is in the result files as "
    "peak_memory_bytes), GiB = 2^30 bytes; '(process)': a file without that figure shows its process peak";

std::string memoryCell(const RunSummary& s) {
  if (s.peakAllocatedBytes) return formatGiB(*s.peakAllocatedBytes);
  return s.peakMemoryBytes ? formatGiB(*s.peakMemoryBytes) + " (process)" : "—";
}

std::string timeToTarget(const RunSummary& s) {
  if (s.target.empty()) return "—";
  return s.timeToTargetS ? formatDuration(*s.timeToTargetS) : "not reached";
}

std::string renderMarkdown(const Report& r) {
  std::string out =
      "| Configuration | Epoch time | Tensor memory/process (GiB) | Top-1 best | Top-1 final | Time to target | Images/s | MFU | "
      "Speed-up | Global batch | Precision | World size | Epochs | Status |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n";
  for (const auto& row : r.rows) {
    const RunSummary& s = row.run;
    out += "| " + mdCell(s.name) + (row.differs.empty() ? "" : " †") + " | " +
           (s.meanEpochTimeS ? formatDuration(*s.meanEpochTimeS) : "—") + " | " +
           memoryCell(s) + " | " + opt(s.bestTop1, "%.2f %%") + " | " +
           opt(s.finalTop1, "%.2f %%") + " | " + timeToTarget(s) + " | " + opt(s.imagesPerS, "%.0f") + " | " +
           (s.mfu ? strf("%.1f %%", 100 * *s.mfu) : "—") + " | " + opt(row.speedup, "%.2f×") + " | " +
           std::to_string(s.globalBatch) + " | " + mdCell(s.precision.empty() ? "—" : s.precision) + " | " +
           std::to_string(s.worldSize) + " | " + std::to_string(s.epochsCompleted) + " | " + mdCell(s.status) + " |\n";
  }
  const RunSummary& base = r.rows[r.baseline].run;
  out += "\nBaseline: " + mdCell(base.name) +
         ". Epoch time: mean training time per epoch; speed-up: the baseline's epoch time / the run's; " +
         std::string(kMemoryNote) + "; images/s: mean over epochs, "
         "all ranks; time to target: run start to the end of the first evaluation meeting the run's target "
         "(set-up and evaluations included); MFU: counted training FLOPs per image x images/s over the "
         "measured peak FLOP/s of all ranks' devices.\n";
  for (const auto& row : r.rows)
    if (!row.run.target.empty())
      out += "\nTarget of " + mdCell(row.run.name) + ": " + mdCell(row.run.target) + ".";
  out += "\n";
  for (const auto& row : r.rows)
    if (!row.differs.empty())
      out += "\n† " + mdCell(row.run.name) + ": provenance differs from the baseline " + mdCell(base.name) + ": " +
             mdCell(joinStrings(row.differs, "; ")) + "\n";
  return out;
}

std::string renderCsv(const Report& r) {
  std::string out =
      "name,file,status,epochs_completed,mean_epoch_time_s,peak_memory_bytes,peak_allocated_bytes,best_val_top1,final_val_top1,"
      "target,time_to_target_s,images_per_s,mfu,speedup,global_batch,precision,world_size,baseline,provenance_differs\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    const RunSummary& s = row.run;
    std::vector<std::string> cells{csvCell(s.name),
                                   csvCell(s.file),
                                   csvCell(s.status),
                                   std::to_string(s.epochsCompleted),
                                   raw(s.meanEpochTimeS),
                                   raw(s.peakMemoryBytes),
                                   raw(s.peakAllocatedBytes),
                                   raw(s.bestTop1),
                                   raw(s.finalTop1),
                                   csvCell(s.target),
                                   raw(s.timeToTargetS),
                                   raw(s.imagesPerS),
                                   raw(s.mfu),
                                   raw(row.speedup),
                                   std::to_string(s.globalBatch),
                                   csvCell(s.precision),
                                   std::to_string(s.worldSize),
                                   i == r.baseline ? "true" : "false",
                                   csvCell(joinStrings(row.differs, "; "))};
    out += joinStrings(cells, ",") + "\n";
  }
  return out;
}

json reportJson(const Report& r) {
  json rows = json::array();
  auto orNull = [](const auto& v) { return v ? json(*v) : json(nullptr); };
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    const RunSummary& s = row.run;
    rows.push_back(json{{"name", s.name},
                        {"file", s.file},
                        {"status", s.status},
                        {"epochs_completed", s.epochsCompleted},
                        {"mean_epoch_time_s", orNull(s.meanEpochTimeS)},
                        {"peak_memory_bytes", orNull(s.peakMemoryBytes)},
                        {"peak_allocated_bytes", orNull(s.peakAllocatedBytes)},
                        {"best_val_top1", orNull(s.bestTop1)},
                        {"final_val_top1", orNull(s.finalTop1)},
                        {"target", s.target.empty() ? json(nullptr) : json(s.target)},
                        {"time_to_target_s", orNull(s.timeToTargetS)},
                        {"images_per_s", orNull(s.imagesPerS)},
                        {"mfu", orNull(s.mfu)},
                        {"speedup", orNull(row.speedup)},
                        {"global_batch", s.globalBatch},
                        {"precision", s.precision.empty() ? json(nullptr) : json(s.precision)},
                        {"world_size", s.worldSize},
                        {"baseline", i == r.baseline},
                        {"provenance_differs", row.differs}});
  }
  return rows;
}

std::string renderJson(const Report& r) { return reportJson(r).dump(2) + "\n"; }

std::string renderReport(const Report& r, const std::string& format) {
  if (format == "md") return renderMarkdown(r);
  if (format == "csv") return renderCsv(r);
  if (format == "json") return renderJson(r);
  if (format == "html") return renderHtml(r);
  throw ReportError("report: unknown format '" + format + "'; valid: md, csv, html, json");
}

int cmdReport(const ReportArgs& args) {
  std::string out;
  try {
    out = renderReport(buildReportFromFiles(args.files, args.baseline), args.format);
  } catch (const ReportError& e) {
    log::error(e.what());
    return kExitBadInput;
  }
  if (args.output.empty()) {
    std::cout << out << std::flush;
    return kExitOk;
  }
  try {
    writeFileAtomically(args.output, out);
  } catch (const std::exception& e) {
    log::error(std::string("report: ") + e.what());
    return kExitBadInput;
  }
  log::info("report: wrote " + args.output);
  return kExitOk;
}

}  // namespace exprun
