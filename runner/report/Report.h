// Purpose: `exprun report` — result files (schema 1) → one comparison table, one row per run:
// mean epoch time, peak memory per process, Top-1 (best and final), images/s, speed-up against a
// baseline run, global batch, precision, world size, epochs, status; rows whose provenance (host,
// CPU model, cores, device, LibTorch version) differs from the baseline's are marked with "†" and
// the differences listed. Rendered as Markdown, CSV, JSON or a self-contained HTML page with inline
// SVG charts (ReportHtml.cpp). Torch-free.
#pragma once

#include <cstdint>
#include <functional>
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
  // Language models (a file whose epochs give tokens_per_s): next-token validation loss (best: the
  // lowest of every evaluation), the final perplexity, tokens/s (mean over epochs), each evaluation's loss.
  bool tokens = false;
  std::optional<double> bestValLoss, finalValLoss, finalPerplexity, tokensPerS;
  std::vector<double> evalLoss;
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
  std::vector<std::string> methods;          // the types of the methods it used, in order
  nlohmann::json methodFigures = nlohmann::json::object();  // each method's section of the file, by type
  std::vector<CompressedModel> compression;  // the models its methods compared (full width, pruned, int8; may be empty)
  // The step breakdown: each phase's seconds per epoch (mean over ranks, as reported: backward with
  // recomputation), mean over the full epochs that record it; the exchange's hidden share, where measured.
  std::optional<PhaseSeconds> phaseSeconds;
  std::optional<double> commOverlap;
  // From its profile (train.profile), if it has one: the slowest modules (forward + backward, timed
  // alone), and one step's memory timeline (live tensor MiB against ms; empty where not measured).
  struct TopModule {
    std::string name, op;
    double seconds = 0, share = 0, peakFraction = 0;  // share: of all modules' seconds
    std::int64_t activationBytes = 0;
  };
  std::vector<TopModule> topModules;
  std::vector<double> memoryMs, memoryMib;
};

// The breakdown cell: the three largest phases' shares of the epoch, "bwd 52 % · fwd 31 % · comm 9 %"
// ("—" without a breakdown).
std::string breakdownCell(const RunSummary& s);

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
// The memory figure a run shows (peak allocated bytes, else its process peak), and the unit the
// report's memory column and chart use: MiB when every run's figure is below 1 GiB, else GiB.
std::optional<std::int64_t> memoryBytes(const RunSummary& s);
ByteUnit memoryUnit(const Report& r);
// The memory column: peak allocated bytes in `unit`, or a file's process peak marked "(process)".
std::string memoryCell(const RunSummary& s, const ByteUnit& unit);
// What the comparison table's columns mean, the memory and MFU notes included (and the language
// models' columns where a run has them): the note under the Markdown table and the HTML one.
std::string columnsNote(const Report& r);
// The precision column: "bf16", or "bf16 (emulated on this CPU)" where the device had no bf16 arithmetic.
std::string precisionCell(const RunSummary& s);

// One column of the comparison, written once for every rendering: its title in the Markdown and
// HTML tables (empty: in CSV and JSON only), its key in CSV and JSON, whether it is a number
// (right-aligned), the cell as the tables show it, and the raw value CSV and JSON hold (null: none,
// an empty CSV cell; a list: its items joined by "; "). A `jsonOnly` column is left out of the CSV,
// and out of a JSON row where its value is null.
struct ReportColumn {
  std::string title, key;
  bool numeric = false;
  bool jsonOnly = false;
  std::function<std::string(const Report&, std::size_t row)> cell;
  std::function<nlohmann::json(const Report&, std::size_t row)> raw;
};
// The columns of report `r`, in order.
std::vector<ReportColumn> reportColumns(const Report& r);

// The compression table (runs whose methods compared models: prune, int8): one row per model of each run — parameters, forward
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
