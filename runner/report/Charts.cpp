// Purpose: the inline SVG charts of the HTML report (see Charts.h).
#include "runner/report/Charts.h"

#include <algorithm>
#include <cmath>

#include "runner/util/Log.h"

namespace exprun {
namespace {

constexpr double kWidth = 640;
const char* kFont = "font-family=\"DejaVu Sans, Arial, Helvetica, sans-serif\"";

// Tableau 10: distinct, readable on white.
const char* kPalette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                          "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

std::string num(double v) { return strf("%.1f", v); }

// Tick label with as many decimals as the step needs.
std::string tickLabel(double v, double step) {
  int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  if (std::fabs(v) < step * 1e-6) v = 0;
  return strf("%.*f", std::min(decimals, 6), v);
}

// Label shortened to about `maxChars` bytes, with an ellipsis; never cuts a UTF-8 sequence.
std::string shorten(const std::string& s, std::size_t maxChars) {
  if (s.size() <= maxChars) return s;
  std::size_t cut = maxChars - 1;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
  return s.substr(0, cut) + "…";
}

std::string text(double x, double y, const std::string& content, const std::string& extra = "") {
  return "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" " + extra + ">" + escapeXml(content) + "</text>\n";
}

std::string svgOpen(const std::string& title, double height) {
  return "<svg class=\"chart\" role=\"img\" width=\"" + num(kWidth) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(kWidth) + " " + num(height) + "\" " + kFont + " font-size=\"12\" fill=\"#222\">\n" +
         "<title>" + escapeXml(title) + "</title>\n" + "<rect x=\"0\" y=\"0\" width=\"" + num(kWidth) + "\" height=\"" +
         num(height) + "\" fill=\"#ffffff\"/>\n" +
         text(kWidth / 2, 22, title,
              "text-anchor=\"middle\" font-size=\"15\" font-weight=\"bold\" class=\"chart-title\"");
}

std::string dash(std::size_t i) { return i < 10 ? "" : (i < 20 ? "6 3" : "2 3"); }

}  // namespace

std::string escapeXml(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string runColor(std::size_t i) { return kPalette[i % 10]; }

std::vector<double> niceTicks(double lo, double hi, int target) {
  if (!(hi > lo)) {
    double pad = std::fabs(hi) > 0 ? std::fabs(hi) * 0.1 : 1.0;
    lo -= pad;
    hi += pad;
  }
  double raw = (hi - lo) / std::max(1, target);
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double f = raw / mag;
  double step = (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  double first = std::floor(lo / step + 1e-9) * step, last = std::ceil(hi / step - 1e-9) * step;
  std::vector<double> ticks;
  for (int k = 0; first + k * step <= last + step * 1e-6 && k < 1000; ++k) ticks.push_back(first + k * step);
  return ticks;
}

std::string svgBarChart(const std::string& title, const std::string& axisLabel, const std::vector<Bar>& bars) {
  const std::size_t n = std::max<std::size_t>(1, bars.size());
  std::size_t longest = 4;
  for (const auto& b : bars) longest = std::max(longest, std::min<std::size_t>(b.label.size(), 28));
  const double left = std::min(230.0, 16.0 + 7.0 * longest), right = kWidth - 90, top = 40;
  const double plotH = std::max(235.0, 24.0 * n), height = top + plotH + 45;
  const double bottom = top + plotH;
  double maxV = 0;
  for (const auto& b : bars)
    if (b.value) maxV = std::max(maxV, *b.value);
  std::vector<double> ticks = niceTicks(0, maxV > 0 ? maxV : 1, 5);
  const double domain = ticks.back() > 0 ? ticks.back() : 1;
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : domain;
  auto xOf = [&](double v) { return left + (right - left) * v / domain; };

  std::string s = svgOpen(title, height);
  for (double t : ticks) {
    double x = xOf(t);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom) +
         "\" stroke=\"#e3e3e3\"/>\n";
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom + 5) +
         "\" stroke=\"#444\"/>\n";
    s += text(x, bottom + 18, tickLabel(t, step), "text-anchor=\"middle\" class=\"tick\"");
  }
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += text((left + right) / 2, height - 8, axisLabel, "text-anchor=\"middle\" class=\"axis-label\"");
  const double band = plotH / n;
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double yMid = top + band * (i + 0.5), thick = std::min(36.0, band * 0.6);
    s += "<g class=\"bar\"><title>" + escapeXml(b.label + ": " + (b.value ? b.valueText : "no data")) + "</title>\n";
    s += text(left - 8, yMid + 4, shorten(b.label, 28), "text-anchor=\"end\"");
    if (b.value) {
      const double w = std::max(1.0, xOf(*b.value) - left);
      s += "<rect x=\"" + num(left) + "\" y=\"" + num(yMid - thick / 2) + "\" width=\"" + num(w) + "\" height=\"" +
           num(thick) + "\" fill=\"" + b.color + "\"/>\n";
      s += text(left + w + 5, yMid + 4, b.valueText);
    } else {
      s += text(left + 6, yMid + 4, "no data", "fill=\"#888\" font-style=\"italic\"");
    }
    s += "</g>\n";
  }
  return s + "</svg>\n";
}

std::string svgStackedBarChart(const std::string& title, const std::string& axisLabel, const std::vector<StackPart>& parts,
                               const std::vector<StackedBar>& bars) {
  const std::size_t n = std::max<std::size_t>(1, bars.size());
  std::size_t longest = 4;
  for (const auto& b : bars) longest = std::max(longest, std::min<std::size_t>(b.label.size(), 28));
  // Room on the right for the longest figure after a bar ("4 min 00 s, comm 7 % hidden").
  std::size_t longestValue = 10;
  for (const auto& b : bars) longestValue = std::max(longestValue, b.valueText.size());
  const double left = std::min(230.0, 16.0 + 7.0 * longest), top = 40;
  const double right = kWidth - std::min(260.0, 12.0 + 6.8 * static_cast<double>(longestValue));
  const double plotH = std::max(150.0, 30.0 * n), bottom = top + plotH;
  const std::size_t perRow = 5, legendRows = (parts.size() + perRow - 1) / perRow;
  const double legendTop = bottom + 60, height = legendTop + 20.0 * legendRows + 8;
  double maxV = 0;
  for (const auto& b : bars) {
    double t = 0;
    for (double v : b.values) t += std::max(0.0, v);
    maxV = std::max(maxV, t);
  }
  std::vector<double> ticks = niceTicks(0, maxV > 0 ? maxV : 1, 5);
  const double domain = ticks.back() > 0 ? ticks.back() : 1;
  const double step = ticks.size() > 1 ? ticks[1] - ticks[0] : domain;
  auto xOf = [&](double v) { return left + (right - left) * v / domain; };

  std::string s = svgOpen(title, height);
  for (double t : ticks) {
    const double x = xOf(t);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom) +
         "\" stroke=\"#e3e3e3\"/>\n";
    s += text(x, bottom + 18, tickLabel(t, step), "text-anchor=\"middle\" class=\"tick\"");
  }
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += text((left + right) / 2, bottom + 36, axisLabel, "text-anchor=\"middle\" class=\"axis-label\"");
  const double band = plotH / n;
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const StackedBar& b = bars[i];
    const double yMid = top + band * (i + 0.5), thick = std::min(30.0, band * 0.65);
    s += text(left - 8, yMid + 4, shorten(b.label, 28), "text-anchor=\"end\"");
    if (b.values.empty()) {
      s += text(left + 6, yMid + 4, "no data", "fill=\"#888\" font-style=\"italic\"");
      continue;
    }
    double total = 0, at = 0;
    for (double v : b.values) total += std::max(0.0, v);
    for (std::size_t k = 0; k < b.values.size() && k < parts.size(); ++k) {
      const double v = std::max(0.0, b.values[k]);
      if (v <= 0) continue;
      const double x0 = xOf(at), x1 = xOf(at + v);
      at += v;
      s += "<rect class=\"seg\" x=\"" + num(x0) + "\" y=\"" + num(yMid - thick / 2) + "\" width=\"" +
           num(std::max(0.5, x1 - x0)) + "\" height=\"" + num(thick) + "\" fill=\"" + parts[k].color + "\"><title>" +
           escapeXml(b.label + ": " + parts[k].name + " " + strf("%.3g s (%.1f %%)", v, total > 0 ? 100 * v / total : 0.0)) +
           "</title></rect>\n";
    }
    s += text(xOf(at) + 5, yMid + 4, b.valueText);
  }
  for (std::size_t k = 0; k < parts.size(); ++k) {
    const double x = 16 + (kWidth - 32) / perRow * static_cast<double>(k % perRow), y = legendTop + 20.0 * (k / perRow);
    s += "<rect x=\"" + num(x) + "\" y=\"" + num(y - 10) + "\" width=\"12\" height=\"12\" fill=\"" + parts[k].color + "\"/>\n";
    s += text(x + 17, y, parts[k].name);
  }
  return s + "</svg>\n";
}

namespace {
// A line chart's legend: one row per run under the plot (from y = 318), its line style and the
// full (escaped) name.
std::string lineLegend(const std::vector<Line>& lines, double left) {
  std::string s;
  for (std::size_t k = 0; k < lines.size(); ++k) {
    const auto& l = lines[k];
    const double y = 318 + 20.0 * k;
    const std::string color = runColor(l.index), d = dash(l.index);
    s += "<g class=\"legend\"><line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + 28) +
         "\" y2=\"" + num(y) + "\" stroke=\"" + color + "\" stroke-width=\"2.5\"" +
         (d.empty() ? "" : " stroke-dasharray=\"" + d + "\"") + "/><circle cx=\"" + num(left + 14) + "\" cy=\"" +
         num(y) + "\" r=\"3.5\" fill=\"" + color + "\"/>\n" + text(left + 36, y + 4, l.label) + "</g>\n";
  }
  return s;
}
}  // namespace

std::string svgLineChart(const std::string& title, const std::string& xLabel, const std::string& yLabel,
                         const std::vector<Line>& lines) {
  const double left = 64, right = kWidth - 24, top = 40, bottom = 262;
  const double height = 318 + 20.0 * std::max<std::size_t>(1, lines.size()) + 6;
  std::size_t maxN = 0;
  double lo = INFINITY, hi = -INFINITY;
  for (const auto& l : lines) {
    maxN = std::max(maxN, l.y.size());
    for (double v : l.y)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  if (maxN == 0 || lo > hi) lo = 0, hi = 1;  // no (finite) points
  std::vector<double> yt = niceTicks(lo, hi, 5);
  const double yStep = yt.size() > 1 ? yt[1] - yt[0] : 1;
  double xLo = maxN > 1 ? 1 : 0.5, xHi = maxN > 1 ? static_cast<double>(maxN) : 1.5;
  std::vector<double> xt;  // ticks of a numeric x axis (lines with their own x)
  double xMax = -INFINITY;
  for (const auto& l : lines)
    for (double v : l.x)
      if (std::isfinite(v)) xMax = std::max(xMax, v);
  if (std::isfinite(xMax)) {
    xt = niceTicks(0, std::max(xMax, 1e-9), 6);
    xLo = xt.front();
    xHi = xt.back();
  }
  auto xOf = [&](double x) { return left + (right - left) * (x - xLo) / (xHi - xLo); };
  auto xAt = [](const Line& l, std::size_t i) { return i < l.x.size() ? l.x[i] : static_cast<double>(i + 1); };
  auto yOf = [&](double y) { return bottom - (bottom - top) * (y - yt.front()) / (yt.back() - yt.front()); };

  std::string s = svgOpen(title, height);
  for (double t : yt) {
    double y = yOf(t);
    s += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(right) + "\" y2=\"" + num(y) +
         "\" stroke=\"#e3e3e3\"/>\n";
    s += "<line x1=\"" + num(left - 5) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left) + "\" y2=\"" + num(y) +
         "\" stroke=\"#444\"/>\n";
    s += text(left - 8, y + 4, tickLabel(t, yStep), "text-anchor=\"end\" class=\"tick\"");
  }
  auto xTick = [&](double at, const std::string& label) {
    const double x = xOf(at);
    s += "<line x1=\"" + num(x) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(x) + "\" y2=\"" + num(bottom + 5) +
         "\" stroke=\"#444\"/>\n";
    s += text(x, bottom + 18, label, "text-anchor=\"middle\" class=\"tick\"");
  };
  if (!xt.empty()) {
    for (double t : xt) xTick(t, tickLabel(t, xt.size() > 1 ? xt[1] - xt[0] : 1));
  } else {
    const std::size_t xStep = maxN <= 12 ? 1 : static_cast<std::size_t>(std::ceil(niceTicks(0, maxN, 8)[1]));
    for (std::size_t e = 1; e <= std::max<std::size_t>(1, maxN); e += xStep) xTick(static_cast<double>(e), std::to_string(e));
  }
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(bottom) + "\" x2=\"" + num(right) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += "<line x1=\"" + num(left) + "\" y1=\"" + num(top) + "\" x2=\"" + num(left) + "\" y2=\"" + num(bottom) +
       "\" stroke=\"#444\"/>\n";
  s += text((left + right) / 2, bottom + 38, xLabel, "text-anchor=\"middle\" class=\"axis-label\"");
  s += text(16, (top + bottom) / 2, yLabel,
            "text-anchor=\"middle\" class=\"axis-label\" transform=\"rotate(-90 16 " + num((top + bottom) / 2) + ")\"");
  for (const auto& l : lines) {
    const std::string color = runColor(l.index), d = dash(l.index);
    s += "<g class=\"series\"><title>" + escapeXml(l.label) + "</title>\n";
    if (l.y.size() > 1) {
      s += "<polyline fill=\"none\" stroke=\"" + color + "\" stroke-width=\"2.5\"" +
           (d.empty() ? "" : " stroke-dasharray=\"" + d + "\"") + " points=\"";
      bool first = true;
      for (std::size_t i = 0; i < l.y.size(); ++i)
        if (std::isfinite(l.y[i])) {  // a diverged run's NaN losses are left out
          s += (first ? "" : " ") + num(xOf(xAt(l, i))) + "," + num(yOf(l.y[i]));
          first = false;
        }
      s += "\"/>\n";
    }
    for (std::size_t i = 0; i < l.y.size() && (l.markers || l.y.size() == 1); ++i)
      if (std::isfinite(l.y[i])) s += "<circle cx=\"" + num(xOf(xAt(l, i))) + "\" cy=\"" + num(yOf(l.y[i])) +
           "\" r=\"3.5\" fill=\"" + color + "\"/>\n";
    s += "</g>\n";
  }
  s += lineLegend(lines, left);
  if (lines.empty())
    s += text((left + right) / 2, (top + bottom) / 2, "no epochs recorded", "text-anchor=\"middle\" fill=\"#888\"");
  return s + "</svg>\n";
}

}  // namespace exprun
