// Purpose: inline SVG charts for the HTML report, written directly (no library, no script):
// horizontal bar charts (one bar per run) and line charts (one line per run over epochs), each
// with a title, axes, ticks, axis labels and, for lines, a legend. All text is escaped.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace exprun {

// Escapes & < > " ' for HTML/SVG text and attribute values.
std::string escapeXml(const std::string& s);

// The colour of the i-th run (distinct for the first ten, then repeating with a dash pattern).
std::string runColor(std::size_t i);

// Tick positions covering [lo, hi] with a "nice" step (1, 2 or 5 × 10^k), about `target` of them;
// the first and last ticks enclose the range.
std::vector<double> niceTicks(double lo, double hi, int target);

struct Bar {
  std::string label;
  std::optional<double> value;  // none: drawn as "no data"
  std::string valueText;        // shown at the end of the bar
  std::string color;
};

// 640 px wide, at least 320 px tall (more for many bars); the value axis starts at 0.
std::string svgBarChart(const std::string& title, const std::string& axisLabel, const std::vector<Bar>& bars);

// One bar per run, made of segments (a run's seconds in each part, in the order of `parts`),
// each part in its own colour, with a legend of the parts under the plot; a segment's tooltip says
// its part, seconds and share of the bar.
struct StackedBar {
  std::string label;
  std::vector<double> values;  // one per part (0: none); empty: "no data"
  std::string valueText;       // shown at the end of the bar
};
struct StackPart {
  std::string name, color;
};
std::string svgStackedBarChart(const std::string& title, const std::string& axisLabel, const std::vector<StackPart>& parts,
                               const std::vector<StackedBar>& bars);

struct Line {
  std::string label;
  std::vector<double> y;  // y[i] at x = i + 1, or at x[i]
  std::size_t index = 0;  // run index, for the colour and dash pattern
  std::vector<double> x;  // empty: 1, 2, ... (epochs)
  bool markers = true;    // a dot on every point (false: the line alone, for dense series)
};

// 640 px wide, 320 px plus one legend row per line; x is the epoch (1, 2, ...) unless the lines
// give their own x (then a numeric axis from 0 covering them all).
std::string svgLineChart(const std::string& title, const std::string& xLabel, const std::string& yLabel,
                         const std::vector<Line>& lines);

}  // namespace exprun
