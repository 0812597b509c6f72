// Purpose: `exprun report` — result files (schema 1) → one comparison table, one row per run:
// mean epoch time, peak memory per process, Top-1 (best and final), images/s, speed-up against a
// baseline run, global batch, precision, world size, epochs, status; rows whose provenance (host,
// CPU model, cores, device, LibTorch version) differs from the baseline's are marked with "†" and
// the differences listed. Rendered as Markdown, CSV, JSON or a self-contained HTML page with inline
// SVG charts (ReportHtml.cpp). Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runner/results/ResultFile.h"
#include "runner/util/Format.h"  // formatDuration, formatGiB

namespace exprun {

// A result file that cannot be reported on; the message names the file and the field.
class ReportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The provenance fields compared against the baseline's (in this order).
const std::vector<std::string>& comparedProvenanceFields();

// One result file, reduced to what the report shows. Optional values are absent for a run
// without epochs.
struct RunSummary {
  std::string file;
  std::string name;
  std::string status;  // running, completed, interrupted
  std::int64_t epochsCompleted = 0;
  std::optional<double> meanEpochTimeS;
  std::optional<std::int64_t> peakMemoryBytes;  // max over epochs (each already the max over ranks)
  // Peak bytes of live tensors (CPU: tracking allocator; CUDA: caching allocator), max over the
  // epochs that record it; absent in files written before it was measured.
  std::optional<std::int64_t> peakAllocatedBytes;  // the training steps' (evaluations apart)
  std::optional<std::int64_t> evalPeakAllocatedBytes;  // the evaluations', max over epochs (files that record it)
  std::optional<double> bestTop1, finalTop1;    // val_top1, percent
  std::optional<double> imagesPerS;             // mean over epochs
  std::int64_t globalBatch = 0;
  std::int64_t worldSize = 0;
  std::string precision;                                        // empty when the file does not say
  std::string emulatedOn;  // "CPU" or "GPU" where the device had no arithmetic for the precision
  std::vector<std::pair<std::string, std::string>> provenance;  // comparedProvenanceFields(), as text
  std::vector<double> valTop1PerEpoch, trainLossPerEpoch;
  std::optional<double> mfu;            // mean over full epochs (files that record it)
  std::string target;                   // "val_top1 >= 92" (empty: the run had no target)
  std::optional<double> timeToTargetS;  // run start -> the evaluation that met it
  std::vector<double> evalTimeS, evalTop1;  // every evaluation: run clock and val Top-1
  std::vector<CompressedModel> compression;  // compress: the full-width, pruned and int8 models (may be empty)
};

struct ReportRow {
  RunSummary run;
  std::optional<double> speedup;     // baseline mean epoch time / this one
  std::vector<std::string> differs;  // "host vm vs gpu01" (baseline's value first)
};

struct Report {
  std::vector<ReportRow> rows;
  std::size_t baseline = 0;  // index into rows
};

// Reads and checks one result file. Throws ReportError naming the file and the field.
RunSummary loadRunSummary(const std::string& path);
// Same from JSON text; `file` names it in messages.
RunSummary runSummaryFromText(const std::string& text, const std::string& file);

// baselineName: a run name among the runs (empty: the first run). Throws ReportError for an
// unknown name (listing the available ones) or no runs.
Report buildReport(std::vector<RunSummary> runs, const std::string& baselineName = "");
Report buildReportFromFiles(const std::vector<std::string>& paths, const std::string& baselineName = "");

// "7 min 42 s" to the run's target, "not reached", or "—" (no target).
std::string timeToTarget(const RunSummary& s);
// The memory column: peak allocated GiB, or a file's process peak marked "(process)".
std::string memoryCell(const RunSummary& s);
// What the memory column means (the table's note).
extern const char* const kMemoryNote;
// The precision column: "bf16", or "bf16 (emulated on this CPU)" where the device had no bf16 arithmetic.
std::string precisionCell(const RunSummary& s);
// What the MFU column means (the table's note).
extern const char* const kMfuNote;

// The compression table (runs with compress:): one row per model of each run — parameters, forward
// FLOPs per image, weight bytes, Top-1, inference images/s at batch 1 and 64 and their speed-up over
// the run's first (full-width fp32) model. Empty when no run compressed.
std::string compressionMarkdown(const Report& r);
std::string renderMarkdown(const Report& r);
std::string renderCsv(const Report& r);
nlohmann::json reportJson(const Report& r);
std::string renderJson(const Report& r);
std::string renderHtml(const Report& r);  // ReportHtml.cpp
// format: md, csv, json or html; throws ReportError otherwise.
std::string renderReport(const Report& r, const std::string& format);

}  // namespace exprun
