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
#include <tuple>

#include "runner/results/ResultFile.h"
#include "runner/spec/Catalog.h"
#include "runner/spec/StoredSpec.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Format.h"
#include "runner/util/JsonFields.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

using nlohmann::json;

std::string opt(const std::optional<double>& v, const char* fmt) { return v ? strf(fmt, *v) : "—"; }

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

}  // namespace

const std::vector<std::string>& comparedProvenanceFields() {
  static const std::vector<std::string> fields{"host", "cpu_model", "cores", "device", "libtorch_version"};
  return fields;
}

namespace {

// The epochs' figures: means over the full epochs (a target may stop a run inside its last one),
// peaks, Top-1 per epoch; times and accuracies must be finite.
void summarizeEpochs(const ResultFile& doc, RunSummary& r, const std::string& file) {
  double timeSum = 0, imagesSum = 0, tokensSum = 0, mfuSum = 0, overlapSum = 0;
  std::size_t full = 0, withMfu = 0, withBreakdown = 0, withOverlap = 0;  // epochs run to their end; of them those recording MFU, ...
  PhaseSeconds phaseSum{};
  for (std::size_t i = 0; i < doc.epochs.size(); ++i) {
    const EpochRecord& e = doc.epochs[i];
    const std::string at = file + ": epochs[" + std::to_string(i) + "].";
    if (!std::isfinite(e.timeS)) throw ReportError(at + "time_s: expected a finite number");
    if (e.timeS < 0) throw ReportError(at + "time_s: negative time " + json(e.timeS).dump());
    if (!std::isfinite(e.imagesPerS)) throw ReportError(at + "images_per_s: expected a finite number");
    if (!std::isfinite(e.valTop1)) throw ReportError(at + "val_top1: expected a finite number");
    if (e.tokensPerS) r.tokens = true;
    if (!e.partial) {
      timeSum += e.timeS;
      imagesSum += e.imagesPerS;
      tokensSum += e.tokensPerS.value_or(0.0);
      ++full;
      if (e.mfu > 0) mfuSum += e.mfu, ++withMfu;
      if (!e.breakdown.empty()) {
        for (std::size_t k = 0; k < kPhases; ++k) phaseSum[k] += e.breakdown.mean[k];
        ++withBreakdown;
        if (e.breakdown.commOverlap) overlapSum += *e.breakdown.commOverlap, ++withOverlap;
      }
    }
    r.peakMemoryBytes = std::max(r.peakMemoryBytes.value_or(0), e.peakMemoryBytes);
    if (e.peakAllocatedBytes >= 0)
      r.peakAllocatedBytes = std::max(r.peakAllocatedBytes.value_or(0), e.peakAllocatedBytes);
    if (e.evalPeakAllocatedBytes >= 0)
      r.evalPeakAllocatedBytes = std::max(r.evalPeakAllocatedBytes.value_or(0), e.evalPeakAllocatedBytes);
    r.valTop1PerEpoch.push_back(e.valTop1);
    r.trainLossPerEpoch.push_back(e.trainLoss);  // NaN for a diverged run (train.on_nonfinite: skip)
    r.bestTop1 = std::max(r.bestTop1.value_or(e.valTop1), e.valTop1);
    r.finalTop1 = e.valTop1;
    if (e.tokensPerS) {
      if (!std::isfinite(e.valLoss)) throw ReportError(at + "val_loss: expected a finite number");
      r.bestValLoss = std::min(r.bestValLoss.value_or(e.valLoss), e.valLoss);
      r.finalValLoss = e.valLoss;
      r.finalPerplexity = e.valPerplexity;
    }
  }
  r.epochsCompleted = static_cast<std::int64_t>(full);
  if (full > 0) {
    r.meanEpochTimeS = timeSum / static_cast<double>(full);
    r.imagesPerS = imagesSum / static_cast<double>(full);
    if (r.tokens) r.tokensPerS = tokensSum / static_cast<double>(full);
  }
  if (withMfu > 0) r.mfu = mfuSum / static_cast<double>(withMfu);
  if (withBreakdown > 0) {
    for (double& v : phaseSum) v /= static_cast<double>(withBreakdown);
    r.phaseSeconds = phaseSum;
  }
  if (withOverlap > 0) r.commOverlap = overlapSum / static_cast<double>(withOverlap);
}

// The profile's top modules (5, by forward + backward time) and memory timeline.
void summarizeProfile(const ResultFile& doc, RunSummary& r, const std::string& file) {
  if (doc.profile.empty()) return;
  try {
    const JsonFields p(doc.profile, "profile");
    if (p.has("modules") && p.object("modules").has("modules")) {
      const json& rows = doc.profile["modules"]["modules"];
      if (!rows.is_array()) throw JsonFieldError("profile.modules.modules: expected an array");
      double total = 0;
      std::vector<RunSummary::TopModule> all;
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const JsonFields m(rows[i], "profile.modules.modules[" + std::to_string(i) + "]");
        RunSummary::TopModule t{m.text("name"), m.text("op"), m.number("forward_s") + m.number("backward_s"), 0,
                                m.number("peak_fraction"), m.integer("activation_bytes")};
        total += t.seconds;
        all.push_back(std::move(t));
      }
      std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
      for (std::size_t i = 0; i < all.size() && i < 5; ++i) {
        all[i].share = total > 0 ? all[i].seconds / total : 0;
        r.topModules.push_back(all[i]);
      }
    }
    if (p.has("memory_timeline")) {
      const JsonFields t = p.object("memory_timeline");
      if (t.boolean("measured")) {
        const json& ms = doc.profile["memory_timeline"]["ms"];
        const json& mib = doc.profile["memory_timeline"]["live_mib"];
        if (!ms.is_array() || !mib.is_array() || ms.size() != mib.size())
          throw JsonFieldError("profile.memory_timeline: ms and live_mib must be arrays of one length");
        for (std::size_t i = 0; i < ms.size(); ++i) {
          r.memoryMs.push_back(ms[i].get<double>());
          r.memoryMib.push_back(mib[i].get<double>());
        }
      }
    }
  } catch (const std::exception& e) {
    throw ReportError(file + ": " + e.what());
  }
}

// The evaluations and the target ("val_loss <= x, val_top1 >= y", in the file's key order).
void summarizeEvals(const ResultFile& doc, RunSummary& r, const std::string& file) {
  for (std::size_t i = 0; i < doc.evals.size(); ++i) {
    const EvalRecord& e = doc.evals[i];
    const std::string at = file + ": evals[" + std::to_string(i) + "].";
    if (!std::isfinite(e.timeS)) throw ReportError(at + "time_s: expected a finite number");
    if (!std::isfinite(e.valTop1)) throw ReportError(at + "val_top1: expected a finite number");
    r.evalTimeS.push_back(e.timeS);
    r.evalTop1.push_back(e.valTop1);
    r.evalLoss.push_back(e.valLoss);
    r.bestTop1 = std::max(r.bestTop1.value_or(e.valTop1), e.valTop1);
    if (r.tokens && std::isfinite(e.valLoss)) r.bestValLoss = std::min(r.bestValLoss.value_or(e.valLoss), e.valLoss);
  }
  const Target& t = doc.target;
  for (const auto& [key, value, op] : {std::tuple{"val_loss", t.valLoss, " <= "}, std::tuple{"val_top1", t.top1, " >= "},
                                       std::tuple{"val_top5", t.top5, " >= "}})
    if (value > 0) r.target += (r.target.empty() ? "" : ", ") + std::string(key) + op + json(value).dump();
  if (const EvalRecord* hit = doc.targetReached()) r.timeToTargetS = hit->timeS;
}

}  // namespace

RunSummary runSummaryFromText(const std::string& textIn, const std::string& file) {
  ResultFile doc;
  try {
    doc = resultFileFromText(textIn, file);
  } catch (const JsonFieldError& e) {
    throw ReportError(e.what());
  }
  RunSummary r;
  r.file = file;
  r.name = doc.name;
  if (r.name.empty()) throw ReportError(file + ": name: empty run name");
  r.status = doc.status;
  try {
    const JsonFields prov(doc.provenance, "provenance");
    r.worldSize = prov.integer("world_size");
    r.globalBatch = prov.integer("global_batch");
    if (prov.has("precision_native") && !prov.boolean("precision_native"))
      r.emulatedOn = prov.has("device") && prov.text("device").rfind("cuda", 0) == 0 ? "GPU" : "CPU";
    if (prov.has("precision"))
      r.precision = prov.text("precision");
    else if (auto p = storedPrecision(doc.spec))
      r.precision = *p;
  } catch (const JsonFieldError& e) {
    throw ReportError(file + ": " + e.what());
  }
  for (const auto& key : comparedProvenanceFields()) {
    auto it = doc.provenance.find(key);
    std::string value = it == doc.provenance.end() || it->is_null() ? "unknown"
                        : it->is_string()                          ? it->get<std::string>()
                                                                   : it->dump();
    r.provenance.emplace_back(key, value);
  }
  summarizeEpochs(doc, r, file);
  summarizeEvals(doc, r, file);
  summarizeProfile(doc, r, file);
  r.compression = doc.compression;
  r.methods = storedMethods(doc.spec);
  r.methodFigures = doc.methods;
  return r;
}

RunSummary loadRunSummary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ReportError(path + ": cannot read result file: " + std::strerror(errno));
  std::stringstream text;
  text << in.rdbuf();
  return runSummaryFromText(text.str(), path);
}

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
    "tensor memory: peak bytes of live tensors per process in the training steps, evaluations apart (CPU: "
    "exprun's tracking allocator; CUDA: the caching "
    "allocator's max allocated; max over epochs and ranks; the process's peak resident set is in the result files as "
    "peak_memory_bytes), in MiB (2^20 bytes) when every run's figure is below 1 GiB, else in GiB (2^30 bytes); "
    "'(process)': a file without that figure shows its process peak";

const char* const kMfuNote =
    "MFU: counted training FLOPs per image x images/s over the peak FLOP/s of all ranks' devices for the run's "
    "precision (a device's published peak, or a CPU's worked out from its ISA and clock; the result file's "
    "provenance.peak_flops_source says which); '> 100 % (peak unknown)': that peak was wrong for the device";

std::string precisionCell(const RunSummary& s) {
  if (s.precision.empty()) return "—";
  return s.emulatedOn.empty() ? s.precision : s.precision + " (emulated on this " + s.emulatedOn + ")";
}

std::optional<std::int64_t> memoryBytes(const RunSummary& s) {
  return s.peakAllocatedBytes ? s.peakAllocatedBytes : s.peakMemoryBytes;
}

ByteUnit memoryUnit(const Report& r) {
  std::int64_t largest = 0;
  for (const auto& row : r.rows)
    if (const auto b = memoryBytes(row.run)) largest = std::max(largest, *b);
  return byteUnitFor(largest);
}

std::string memoryCell(const RunSummary& s, const ByteUnit& unit) {
  const auto bytes = memoryBytes(s);
  if (!bytes) return "—";
  return unit.format(*bytes) + (s.peakAllocatedBytes ? "" : " (process)");
}

namespace {
// Whether a run of the report counts tokens (a language model) or images.
bool anyRun(const Report& r, bool tokens) {
  return std::any_of(r.rows.begin(), r.rows.end(), [tokens](const ReportRow& row) { return row.run.tokens == tokens; });
}
}  // namespace

std::string columnsNote(const Report& r) {
  const std::string lm =
      anyRun(r, true) ? "; language models: val loss: the mean next-token cross-entropy over the fixed evaluation windows (best: "
               "the lowest of every evaluation), perplexity: exp(final val loss), token accuracy: the share of next "
               "tokens predicted (argmax), tokens/s: training tokens per second, all ranks, evaluations excluded, and "
               "MFU counts FLOPs per token x tokens/s"
             : "";
  return std::string("Epoch time: mean training time per epoch; speed-up: the baseline's epoch time / the run's; ") +
         kMemoryNote +
         "; images/s: mean over epochs, all ranks; time to target: run start to the end of the first evaluation "
         "meeting the run's target (set-up and evaluations included); where the time goes: the three largest phases "
         "of the step breakdown, as shares of the epoch with its evaluations and checkpoint saves (mean over ranks); " +
         kMfuNote + lm;
}

std::string timeToTarget(const RunSummary& s) {
  if (s.target.empty()) return "—";
  return s.timeToTargetS ? formatDuration(*s.timeToTargetS) : "not reached";
}

std::string compressionMarkdown(const Report& r) {
  std::string out;
  for (const auto& row : r.rows) {
    const RunSummary& s = row.run;
    if (s.compression.empty()) continue;
    if (out.empty())
      out = "| Configuration | Model | Parameters | Forward FLOPs/image | Weights (MB) | Top-1 | Images/s, batch 1 | "
            "Images/s, batch 64 | Speed-up, batch 64 |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n";
    const CompressedModel& first = s.compression.front();
    for (const auto& m : s.compression) {
      const auto speed = [](double v) { return v > 0 ? strf("%.0f", v) : std::string("—"); };
      out += "| " + mdCell(s.name) + " | " + mdCell(m.model) + " | " + std::to_string(m.params) + " | " +
             strf("%.3g", m.flopsPerImage) + " | " + strf("%.2f", static_cast<double>(m.bytes) / 1e6) + " | " +
             (m.top1 < 0 ? std::string("—") : strf("%.2f %%", m.top1)) + " | " + speed(m.imagesPerSB1) + " | " +
             speed(m.imagesPerSB64) + " | " +
             (m.imagesPerSB64 > 0 && first.imagesPerSB64 > 0 ? strf("%.2f×", m.imagesPerSB64 / first.imagesPerSB64)
                                                             : std::string("—")) +
             " |\n";
    }
  }
  if (out.empty()) return out;
  return "\n### Compression\n\n" + out +
         "\nPer run: its full-width fp32 model (Top-1 before the first pruning step), the pruned model at the end, "
         "its int8 conversion (post-training, on the CPU's int8 kernels); inference in evaluation mode on the run's "
         "device, median of timed repeats; speed-up against the run's first row.\n";
}

namespace {

// A column's raw value as CSV text: numbers as JSON writes them, null as nothing, lists joined.
std::string csvText(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csvCell(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_array()) {
    std::vector<std::string> parts;
    for (const auto& e : v) parts.push_back(e.is_string() ? e.get<std::string>() : e.dump());
    return csvCell(joinStrings(parts, "; "));
  }
  return v.dump();
}

json orNull(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }
json orNull(const std::optional<std::int64_t>& v) { return v ? json(*v) : json(nullptr); }

bool aboveThePeak(const RunSummary& s) { return s.mfu && *s.mfu > 1; }

using Cell = std::function<std::string(const Report&, std::size_t)>;
using Raw = std::function<json(const Report&, std::size_t)>;

ReportColumn shown(std::string title, std::string key, bool numeric, Cell cell, Raw raw) {
  ReportColumn c;
  c.title = std::move(title);
  c.key = std::move(key);
  c.numeric = numeric;
  c.cell = std::move(cell);
  c.raw = std::move(raw);
  return c;
}

// A column of the CSV and JSON renderings only.
ReportColumn rawOnly(std::string key, Raw raw, bool jsonOnly = false) {
  ReportColumn c = shown("", std::move(key), false, {}, std::move(raw));
  c.jsonOnly = jsonOnly;
  return c;
}

const RunSummary& run(const Report& r, std::size_t i) { return r.rows[i].run; }

}  // namespace

namespace {

// The columns the methods the runs used declare (Catalog: PluginInfo::columns), each shown where a
// run's section of that method holds the value.
void addMethodColumns(std::vector<ReportColumn>& columns, const Report& r) {
  std::vector<std::string> types;
  for (const auto& row : r.rows)
    for (const auto& t : row.run.methods)
      if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  for (const auto& type : types) {
    const PluginInfo* info = Catalog::instance().find("method", type);
    if (!info) continue;
    for (const ResultColumn& rc : info->columns) {
      const auto value = [type, rc](const Report& r, std::size_t i) -> json {
        const json& figures = run(r, i).methodFigures;
        if (!figures.contains(type)) return nullptr;
        const json::json_pointer at(rc.pointer);
        return figures[type].contains(at) ? figures[type][at] : json(nullptr);
      };
      columns.push_back(shown(rc.title, rc.key, !rc.format.empty(),
                              [value, rc](const Report& r, std::size_t i) {
                                const json v = value(r, i);
                                if (v.is_number() && !rc.format.empty()) return strf(rc.format.c_str(), v.get<double>());
                                if (v.is_string()) return v.get<std::string>();
                                return v.is_null() ? std::string("—") : v.dump();
                              },
                              value));
    }
  }
}

}  // namespace

std::string breakdownCell(const RunSummary& s) {
  if (!s.phaseSeconds) return "—";
  const PhaseSeconds& p = *s.phaseSeconds;
  const double total = summedSeconds(p);
  if (total <= 0) return "—";
  std::vector<std::size_t> order;
  for (std::size_t k = 0; k < kPhases; ++k)
    if (isSummand(phaseAt(k))) order.push_back(k);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
  std::vector<std::string> top;
  for (std::size_t i = 0; i < 3 && i < order.size(); ++i)
    top.push_back(strf("%s %.0f %%", phaseLabel(phaseAt(order[i])), 100 * p[order[i]] / total));
  return joinStrings(top, " · ");
}

namespace {
// The breakdown's raw columns: time_<phase>_s (seconds per epoch, mean over ranks) and comm_overlap.
void addBreakdownColumns(std::vector<ReportColumn>& c) {
  for (std::size_t k = 0; k < kPhases; ++k)
    c.push_back(rawOnly(std::string("time_") + phaseKey(phaseAt(k)) + "_s", [k](const Report& r, std::size_t i) {
      const auto& p = run(r, i).phaseSeconds;
      return p ? json((*p)[k]) : json(nullptr);
    }));
  c.push_back(rawOnly("comm_overlap", [](const Report& r, std::size_t i) { return orNull(run(r, i).commOverlap); }));
}
}  // namespace

// One declarative table, a column an entry in the order shown (84 lines: longer than a function
// should be, kept so that the columns read top to bottom as the report shows them).
std::vector<ReportColumn> reportColumns(const Report& r) {
  const bool anyMethods =
      std::any_of(r.rows.begin(), r.rows.end(), [](const ReportRow& row) { return !row.run.methods.empty(); });
  const ByteUnit memUnit = memoryUnit(r);
  // Columns of images and of tokens: each shown where a run has that unit (a report of language
  // models alone shows token accuracy where classifiers show Top-1).
  const bool anyTokens = anyRun(r, true), anyImages = anyRun(r, false);
  std::vector<ReportColumn> c{
      shown("Configuration", "name", false,
            [](const Report& r, std::size_t i) { return run(r, i).name + (r.rows[i].differs.empty() ? "" : " †"); },
            [](const Report& r, std::size_t i) { return json(run(r, i).name); }),
      rawOnly("file", [](const Report& r, std::size_t i) { return json(run(r, i).file); }),
      shown("Epoch time", "mean_epoch_time_s", true,
            [](const Report& r, std::size_t i) {
              const auto& t = run(r, i).meanEpochTimeS;
              return t ? formatDuration(*t) : std::string("—");
            },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).meanEpochTimeS); }),
      shown(std::string("Tensor memory/process (") + memUnit.name + ")", "peak_allocated_bytes", true,
            [memUnit](const Report& r, std::size_t i) { return memoryCell(run(r, i), memUnit); },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).peakAllocatedBytes); }),
      rawOnly("peak_memory_bytes", [](const Report& r, std::size_t i) { return orNull(run(r, i).peakMemoryBytes); }),
      rawOnly("eval_peak_allocated_bytes",
              [](const Report& r, std::size_t i) { return orNull(run(r, i).evalPeakAllocatedBytes); }),
      shown(anyImages ? "Top-1 best" : "", "best_val_top1", true, [](const Report& r, std::size_t i) { return opt(run(r, i).bestTop1, "%.2f %%"); },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).bestTop1); }),
      shown(anyImages ? "Top-1 final" : "Token accuracy", "final_val_top1", true,
            [](const Report& r, std::size_t i) { return opt(run(r, i).finalTop1, "%.2f %%"); },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).finalTop1); }),
      shown("Time to target", "time_to_target_s", true, [](const Report& r, std::size_t i) { return timeToTarget(run(r, i)); },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).timeToTargetS); }),
      rawOnly("target",
              [](const Report& r, std::size_t i) {
                const std::string& t = run(r, i).target;
                return t.empty() ? json(nullptr) : json(t);
              }),
      shown(anyImages ? "Images/s" : "", "images_per_s", true, [](const Report& r, std::size_t i) { return opt(run(r, i).imagesPerS, "%.0f"); },
            [](const Report& r, std::size_t i) { return orNull(run(r, i).imagesPerS); }),
      shown("MFU", "mfu", true,
            [](const Report& r, std::size_t i) {
              const auto& m = run(r, i).mfu;
              return m ? formatMfu(*m) : std::string("—");
            },
            [](const Report& r, std::size_t i) { return aboveThePeak(run(r, i)) ? json(nullptr) : orNull(run(r, i).mfu); }),
      rawOnly("mfu_note",
              [](const Report& r, std::size_t i) { return aboveThePeak(run(r, i)) ? json(kMfuAbovePeak) : json(nullptr); },
              true),
      shown("Where the time goes", "breakdown", false, [](const Report& r, std::size_t i) { return breakdownCell(run(r, i)); },
            [](const Report& r, std::size_t i) {
              const std::string c = breakdownCell(run(r, i));
              return c == "—" ? json(nullptr) : json(c);
            }),
      shown("Speed-up", "speedup", true, [](const Report& r, std::size_t i) { return opt(r.rows[i].speedup, "%.2f×"); },
            [](const Report& r, std::size_t i) { return orNull(r.rows[i].speedup); }),
      shown("Global batch", "global_batch", true, [](const Report& r, std::size_t i) { return std::to_string(run(r, i).globalBatch); },
            [](const Report& r, std::size_t i) { return json(run(r, i).globalBatch); }),
      shown("Precision", "precision", false, [](const Report& r, std::size_t i) { return precisionCell(run(r, i)); },
            [](const Report& r, std::size_t i) {
              const std::string& p = run(r, i).precision;
              return p.empty() ? json(nullptr) : json(p);
            }),
      rawOnly("precision_emulated", [](const Report& r, std::size_t i) { return json(!run(r, i).emulatedOn.empty()); }),
      shown("World size", "world_size", true, [](const Report& r, std::size_t i) { return std::to_string(run(r, i).worldSize); },
            [](const Report& r, std::size_t i) { return json(run(r, i).worldSize); }),
      shown("Epochs", "epochs_completed", true,
            [](const Report& r, std::size_t i) { return std::to_string(run(r, i).epochsCompleted); },
            [](const Report& r, std::size_t i) { return json(run(r, i).epochsCompleted); }),
      shown("Status", "status", false, [](const Report& r, std::size_t i) { return run(r, i).status; },
            [](const Report& r, std::size_t i) { return json(run(r, i).status); }),
      shown(anyMethods ? "Methods" : "", "methods", false,
            [](const Report& r, std::size_t i) {
              const auto& m = run(r, i).methods;
              return m.empty() ? std::string("—") : joinStrings(m, ", ");
            },
            [](const Report& r, std::size_t i) { return json(run(r, i).methods); }),
      rawOnly("baseline", [](const Report& r, std::size_t i) { return json(i == r.baseline); }),
      rawOnly("provenance_differs", [](const Report& r, std::size_t i) { return json(r.rows[i].differs); }),
      rawOnly("compression",
              [](const Report& r, std::size_t i) {
                const auto& c = run(r, i).compression;
                return c.empty() ? json(nullptr) : json(c);
              },
              true),
  };
  if (anyTokens) {
    // After the Top-1 columns: val loss best and final, perplexity; tokens/s after images/s.
    auto at = [&c](const char* key) {
      return std::find_if(c.begin(), c.end(), [key](const ReportColumn& x) { return x.key == key; }) + 1;
    };
    c.insert(at("final_val_top1"),
             {shown("Val loss best", "best_val_loss", true,
                    [](const Report& r, std::size_t i) { return opt(run(r, i).bestValLoss, "%.4f"); },
                    [](const Report& r, std::size_t i) { return orNull(run(r, i).bestValLoss); }),
              shown("Val loss final", "final_val_loss", true,
                    [](const Report& r, std::size_t i) { return opt(run(r, i).finalValLoss, "%.4f"); },
                    [](const Report& r, std::size_t i) { return orNull(run(r, i).finalValLoss); }),
              shown("Perplexity", "final_val_perplexity", true,
                    [](const Report& r, std::size_t i) { return opt(run(r, i).finalPerplexity, "%.2f"); },
                    [](const Report& r, std::size_t i) { return orNull(run(r, i).finalPerplexity); })});
    c.insert(at("images_per_s"),
             shown("Tokens/s", "tokens_per_s", true, [](const Report& r, std::size_t i) { return opt(run(r, i).tokensPerS, "%.0f"); },
                   [](const Report& r, std::size_t i) { return orNull(run(r, i).tokensPerS); }));
  }
  addBreakdownColumns(c);
  addMethodColumns(c, r);
  return c;
}

std::string renderMarkdown(const Report& r) {
  const std::vector<ReportColumn> columns = reportColumns(r);
  std::string head = "|", rule = "|";
  for (const auto& c : columns)
    if (!c.title.empty()) head += " " + c.title + " |", rule += c.numeric ? "---:|" : "---|";
  std::string out = head + "\n" + rule + "\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    out += "|";
    for (const auto& c : columns)
      if (!c.title.empty()) out += " " + mdCell(c.cell(r, i)) + " |";
    out += "\n";
  }
  const RunSummary& base = r.rows[r.baseline].run;
  out += "\nBaseline: " + mdCell(base.name) + ". " + columnsNote(r) + ".\n";
  for (const auto& row : r.rows)
    if (!row.run.target.empty())
      out += "\nTarget of " + mdCell(row.run.name) + ": " + mdCell(row.run.target) + ".";
  out += "\n";
  for (const auto& row : r.rows)
    if (!row.differs.empty())
      out += "\n† " + mdCell(row.run.name) + ": provenance differs from the baseline " + mdCell(base.name) + ": " +
             mdCell(joinStrings(row.differs, "; ")) + "\n";
  return out + compressionMarkdown(r);
}

std::string renderCsv(const Report& r) {
  const std::vector<ReportColumn> columns = reportColumns(r);
  std::vector<std::string> header;
  for (const auto& c : columns)
    if (!c.jsonOnly) header.push_back(c.key);
  std::string out = joinStrings(header, ",") + "\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    std::vector<std::string> cells;
    for (const auto& c : columns) {
      if (c.jsonOnly) continue;
      // An MFU above the peak is no figure: the CSV says so in its cell.
      cells.push_back(c.key == "mfu" && aboveThePeak(run(r, i)) ? csvCell(kMfuAbovePeak) : csvText(c.raw(r, i)));
    }
    out += joinStrings(cells, ",") + "\n";
  }
  return out;
}

json reportJson(const Report& r) {
  const std::vector<ReportColumn> columns = reportColumns(r);
  json rows = json::array();
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    json row = json::object();
    for (const auto& c : columns) {
      json v = c.raw(r, i);
      if (c.jsonOnly && v.is_null()) continue;
      row[c.key] = std::move(v);
    }
    rows.push_back(std::move(row));
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

}  // namespace exprun
