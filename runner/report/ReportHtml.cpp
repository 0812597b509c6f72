// Purpose: the HTML rendering of a report: one self-contained page (inline CSS, inline SVG, no
// script, no external resource) with the comparison table, the provenance notes, the compression
// table (runs whose methods compared models: prune, int8) and the charts: mean epoch time, throughput, memory per process,
// validation Top-1 per epoch, train loss per epoch, validation Top-1 against wall-clock time (every
// evaluation, every run on one axes), and for runs whose methods compared models: Top-1 against forward FLOPs and
// inference throughput.
#include "runner/report/Report.h"

#include <algorithm>

#include "runner/report/Charts.h"
#include "runner/results/ResultFile.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

const char* kStyle = R"(body { font-family: "DejaVu Sans", Arial, Helvetica, sans-serif; margin: 24px; color: #222;
       background: #fff; max-width: 1340px; }
h1 { font-size: 22px; margin: 0 0 6px; }
h2 { font-size: 18px; margin: 24px 0 8px; }
p.meta { color: #555; margin: 0 0 12px; font-size: 13px; }
p.columns { color: #555; margin: 8px 0 16px; font-size: 12px; max-width: 70em; }
table.report { border-collapse: collapse; font-size: 14px; }
table.report th, table.report td { border: 1px solid #c8c8c8; padding: 5px 9px; }
table.report th { background: #eef1f5; text-align: left; }
table.report td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.report tr.baseline td { background: #f6f9ee; font-weight: bold; }
span.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 6px; vertical-align: baseline; }
ul.notes { font-size: 13px; color: #333; }
div.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 16px; }
figure.chart { margin: 0; border: 1px solid #ddd; padding: 4px; background: #fff; max-width: 660px; }
figure.chart svg { display: block; width: 100%; height: auto; }
)";

std::string td(const std::string& content, bool numeric = true) {
  return std::string("<td") + (numeric ? " class=\"num\"" : "") + ">" + escapeXml(content) + "</td>";
}

std::string figure(const std::string& svg) { return "<figure class=\"chart\">\n" + svg + "</figure>\n"; }

// The comparison table, one row a run (the baseline's in bold): the report's columns with a title.
std::string comparisonTable(const Report& r) {
  const std::vector<ReportColumn> columns = reportColumns(r);
  std::string h = "<h2>Comparison</h2>\n<table class=\"report\">\n<thead><tr>";
  for (const auto& c : columns)
    if (!c.title.empty()) h += "<th>" + escapeXml(c.title) + "</th>";
  h += "</tr></thead>\n<tbody>\n";
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const auto& row = r.rows[i];
    const RunSummary& s = row.run;
    h += std::string("<tr class=\"run") + (i == r.baseline ? " baseline" : "") + "\">";
    for (const auto& c : columns) {
      if (c.title.empty()) continue;
      if (c.key == "name")  // the run's colour in the charts, its file on hovering
        h += "<td title=\"" + escapeXml(s.file) + "\"><span class=\"swatch\" style=\"background:" + runColor(i) +
             "\"></span>" + escapeXml(s.name) + (row.differs.empty() ? "" : "&#160;†") + "</td>";
      else if (c.key == "time_to_target_s")  // the target on hovering
        h += "<td class=\"num\" title=\"" + escapeXml(s.target) + "\">" + escapeXml(c.cell(r, i)) + "</td>";
      else
        h += td(c.cell(r, i), c.numeric);
    }
    h += "</tr>\n";
  }
  h += "</tbody>\n</table>\n";
  std::string notes;
  for (const auto& row : r.rows) {
    if (row.differs.empty()) continue;
    std::string what;
    for (std::size_t k = 0; k < row.differs.size(); ++k) what += (k ? "; " : "") + row.differs[k];
    notes += "<li>† " + escapeXml(row.run.name) + ": provenance differs from the baseline " +
             escapeXml(r.rows[r.baseline].run.name) + ": " + escapeXml(what) + "</li>\n";
  }
  if (!notes.empty()) h += "<ul class=\"notes\">\n" + notes + "</ul>\n";
  return h;
}

// The compression table (runs whose methods compared models: prune, int8), as Report.h's compressionMarkdown; empty when no run compressed.
std::string compressionTable(const Report& r) {
  if (std::all_of(r.rows.begin(), r.rows.end(), [](const ReportRow& row) { return row.run.compression.empty(); }))
    return "";
  std::string h = "<h2>Compression</h2>\n<table>\n<thead><tr><th>Configuration</th><th>Model</th><th>Parameters</th><th>Forward FLOPs/image</th>"
                  "<th>Weights (MB)</th><th>Top-1</th><th>Images/s, batch 1</th><th>Images/s, batch 64</th></tr></thead>\n<tbody>\n";
  for (const auto& row : r.rows)
    for (const auto& m : row.run.compression)
      h += "<tr>" + td(row.run.name, false) + td(m.model, false) + td(std::to_string(m.params)) +
           td(strf("%.3g", m.flopsPerImage)) + td(strf("%.2f", static_cast<double>(m.bytes) / 1e6)) +
           td(m.top1 < 0 ? "—" : strf("%.2f %%", m.top1)) + td(m.imagesPerSB1 > 0 ? strf("%.0f", m.imagesPerSB1) : "—") +
           td(m.imagesPerSB64 > 0 ? strf("%.0f", m.imagesPerSB64) : "—") + "</tr>\n";
  return h + "</tbody>\n</table>\n";
}

// The charts.
std::string charts(const Report& r) {
  std::vector<Bar> timeBars, speedBars, tokenBars, memBars;
  std::vector<Line> top1Lines, lossLines, timeLines, valLossLines;
  const ByteUnit unit = memoryUnit(r);
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const RunSummary& s = r.rows[i].run;
    const std::string color = runColor(i);
    timeBars.push_back(Bar{s.name, s.meanEpochTimeS, s.meanEpochTimeS ? formatDuration(*s.meanEpochTimeS) : "", color});
    if (s.tokens)  // language models: tokens/s, and the validation loss at each evaluation
      tokenBars.push_back(Bar{s.name, s.tokensPerS, s.tokensPerS ? strf("%.0f", *s.tokensPerS) : "", color});
    else
      speedBars.push_back(Bar{s.name, s.imagesPerS, s.imagesPerS ? strf("%.0f", *s.imagesPerS) : "", color});
    if (s.tokens && !s.evalTimeS.empty()) valLossLines.push_back(Line{s.name, s.evalLoss, i, s.evalTimeS});
    std::optional<double> mem;
    const auto bytes = memoryBytes(s);
    if (bytes) mem = unit.value(*bytes);
    memBars.push_back(Bar{s.name, mem,
                          bytes ? unit.format(*bytes) + " " + unit.name + (s.peakAllocatedBytes ? "" : " (process)") : "",
                          color});
    if (s.epochsCompleted > 0) {
      top1Lines.push_back(Line{s.name, s.valTop1PerEpoch, i, {}});
      lossLines.push_back(Line{s.name, s.trainLossPerEpoch, i, {}});
    }
    if (!s.evalTimeS.empty()) timeLines.push_back(Line{s.name, s.evalTop1, i, s.evalTimeS});
  }
  std::string h = "<h2>Charts</h2>\n<div class=\"charts\">\n";
  h += figure(svgBarChart("Mean epoch time", "seconds per epoch (training)", timeBars));
  if (!speedBars.empty()) h += figure(svgBarChart("Throughput", "images/s (all ranks)", speedBars));
  if (!tokenBars.empty()) h += figure(svgBarChart("Throughput (language models)", "tokens/s (all ranks)", tokenBars));
  h += figure(svgBarChart("Memory per process", std::string("peak ") + unit.name + " of live tensors per process", memBars));
  h += figure(svgLineChart("Validation Top-1 per epoch", "epoch", "val Top-1 (%)", top1Lines));
  h += figure(svgLineChart("Training loss per epoch", "epoch", "train loss", lossLines));
  h += figure(svgLineChart("Validation Top-1 against wall-clock time", "seconds since the run started",
                           "val Top-1 (%)", timeLines));
  if (!valLossLines.empty())
    h += figure(svgLineChart("Validation loss against wall-clock time (language models)", "seconds since the run started",
                             "val loss (next-token cross-entropy)", valLossLines));
  std::vector<Line> compressed;
  std::vector<Bar> inference;
  for (std::size_t i = 0; i < r.rows.size(); ++i) {
    const RunSummary& s = r.rows[i].run;
    Line l{s.name, {}, i, {}};
    for (const auto& m : s.compression) {
      if (m.top1 >= 0) {
        l.x.push_back(m.flopsPerImage / 1e6);
        l.y.push_back(m.top1);
      }
      if (m.imagesPerSB64 > 0)
        inference.push_back(Bar{s.name + ": " + m.model, m.imagesPerSB64, strf("%.0f", m.imagesPerSB64), runColor(i)});
    }
    if (!l.x.empty()) compressed.push_back(l);
  }
  if (!compressed.empty())
    h += figure(svgLineChart("Top-1 against forward FLOPs (full width → pruned → int8)", "forward MFLOPs per image",
                             "test Top-1 (%)", compressed));
  if (!inference.empty()) h += figure(svgBarChart("Inference throughput", "images/s at batch 64", inference));
  return h + "</div>\n";
}

// The profiled runs' slowest modules (train.profile's per-module table), five per run.
std::string modulesTable(const Report& r) {
  if (std::all_of(r.rows.begin(), r.rows.end(), [](const ReportRow& row) { return row.run.topModules.empty(); }))
    return "";
  std::string h = "<h2>Top modules</h2>\n<table>\n<thead><tr><th>Configuration</th><th>Module</th><th>Op</th>"
                  "<th>Forward + backward (ms)</th><th>Share of the modules' time</th><th>% of peak FLOP/s</th>"
                  "<th>Activations kept (MiB)</th></tr></thead>\n<tbody>\n";
  for (const auto& row : r.rows)
    for (const auto& m : row.run.topModules)
      h += "<tr>" + td(row.run.name, false) + td(m.name, false) + td(m.op, false) + td(strf("%.3f", 1e3 * m.seconds)) +
           td(strf("%.1f %%", 100 * m.share)) + td(m.peakFraction > 0 ? strf("%.1f %%", 100 * m.peakFraction) : "—") +
           td(strf("%.2f", static_cast<double>(m.activationBytes) / 1048576.0)) + "</tr>\n";
  return h + "</tbody>\n</table>\n<p class=\"columns\">Each module timed alone on one micro-batch in train mode "
             "(median of 3), from the run's profile (train.profile; <code>exprun profile</code>).</p>\n";
}

// Where each run's epoch goes: one stacked bar per run, a segment per phase of the step breakdown.
std::string breakdownChart(const Report& r) {
  static const char* const colors[kPhases] = {"#8c564b", "#e377c2", "#1f77b4", "#ff7f0e", "", "#d62728",
                                              "#2ca02c", "#9467bd", "#17becf", "#bcbd22", "#7f7f7f", "#aec7e8"};
  std::vector<StackPart> parts;
  std::vector<std::size_t> phases;
  for (std::size_t k = 0; k < kPhases; ++k)
    if (isSummand(phaseAt(k))) {
      parts.push_back(StackPart{phaseLabel(phaseAt(k)), colors[k]});
      phases.push_back(k);
    }
  std::vector<StackedBar> bars;
  bool any = false;
  for (const auto& row : r.rows) {
    const RunSummary& s = row.run;
    StackedBar b{s.name, {}, ""};
    if (s.phaseSeconds) {
      any = true;
      for (std::size_t k : phases) b.values.push_back((*s.phaseSeconds)[k]);
      b.valueText = formatDuration(summedSeconds(*s.phaseSeconds));
      if (s.commOverlap) b.valueText += strf(", comm %.0f %% hidden", 100 * *s.commOverlap);
    }
    bars.push_back(std::move(b));
  }
  std::vector<Line> memory;
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (!r.rows[i].run.memoryMs.empty())
      memory.push_back(Line{r.rows[i].run.name, r.rows[i].run.memoryMib, i, r.rows[i].run.memoryMs, false});
  if (!any && memory.empty()) return "";
  std::string h = "<h2>Where the time goes</h2>\n<div class=\"charts\">\n";
  if (any)
    h += figure(svgStackedBarChart("Step breakdown per epoch",
                                   "seconds per epoch (mean over ranks; evaluation and checkpoints included)", parts, bars));
  if (!memory.empty())
    h += figure(svgLineChart("Memory timeline of one training step", "ms since the step began",
                             "live tensor MiB (this process)", memory));
  return h + "</div>\n" + modulesTable(r);
}

}  // namespace

std::string renderHtml(const Report& r) {
  const RunSummary& base = r.rows[r.baseline].run;
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>exprun report: " +
                  std::to_string(r.rows.size()) + " run(s), baseline " + escapeXml(base.name) + "</title>\n<style>\n" +
                  kStyle + "</style>\n</head>\n<body>\n";
  h += "<h1>exprun report</h1>\n<p class=\"meta\">" + std::to_string(r.rows.size()) + " run(s); baseline <b>" +
       escapeXml(base.name) + "</b>.</p>\n";
  // What the columns mean goes under the table, where a reader looks for it after the figures.
  const std::string legend = "<p class=\"columns\">" + escapeXml(columnsNote(r)) + ".</p>\n";
  return h + comparisonTable(r) + legend + compressionTable(r) + breakdownChart(r) + charts(r) + "</body>\n</html>\n";
}

}  // namespace exprun
