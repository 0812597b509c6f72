// Purpose: formatting and parsing of text for people (see Format.h).
#include "runner/util/Format.h"

#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <regex>
#include <stdexcept>
#include <vector>

namespace exprun {

std::string strf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::vector<char> buf(static_cast<size_t>(n > 0 ? n : 0) + 1);
  std::vsnprintf(buf.data(), buf.size(), fmt, ap2);
  va_end(ap2);
  return std::string(buf.data(), static_cast<size_t>(n > 0 ? n : 0));
}

std::string formatDuration(double s) {
  if (s < 59.95) return strf("%.1f s", s);
  long long total = std::llround(s);
  if (total < 3600) return strf("%lld min %02lld s", total / 60, total % 60);
  long long minutes = std::llround(s / 60.0);
  return strf("%lld h %02lld min", minutes / 60, minutes % 60);
}

std::string formatGiB(std::int64_t bytes) {
  return strf("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

std::string formatMiB(std::int64_t bytes) { return strf("%.1f", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

ByteUnit byteUnitFor(std::int64_t largest) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return static_cast<double>(largest) < kGiB ? ByteUnit{"MiB", 1024.0 * 1024.0, "%.1f"} : ByteUnit{"GiB", kGiB, "%.2f"};
}

std::string ByteUnit::format(std::int64_t n) const { return strf(decimals, value(n)); }

std::int64_t parseBytes(const std::string& text) {
  static const std::regex re(R"(^\s*([0-9]+(\.[0-9]+)?)\s*([KMGT]i?B|B)?\s*$)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw std::invalid_argument("'" + text + "' is not a memory size (e.g. 20GiB, 512MiB, 1.5GB)");
  double v = std::stod(m[1].str());
  std::string unit = m[3].str();
  for (auto& c : unit) c = static_cast<char>(std::toupper(c));
  const bool binary = unit.size() == 3;
  const double base = binary ? 1024.0 : 1000.0;
  int power = 0;
  if (!unit.empty() && unit != "B") power = std::string("KMGT").find(unit[0]) + 1;
  return static_cast<std::int64_t>(v * std::pow(base, power));
}

double parseDuration(const std::string& text) {
  static const std::regex re(R"(^\s*([0-9]+(\.[0-9]+)?)\s*(s|sec|min|m|h)?\s*$)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, re))
    throw std::invalid_argument("'" + text + "' is not a duration (e.g. 300, 90s, 5min, 1.5h)");
  std::string unit = m[3].str();
  for (auto& c : unit) c = static_cast<char>(std::tolower(c));
  const double factor = unit == "h" ? 3600.0 : (unit == "min" || unit == "m") ? 60.0 : 1.0;
  return std::stod(m[1].str()) * factor;
}

std::string joinStrings(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

std::vector<std::string> splitString(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(sep, start);
    if (end == std::string::npos) end = text.size();
    std::string part = text.substr(start, end - start);
    const auto first = part.find_first_not_of(" \t"), last = part.find_last_not_of(" \t");
    if (first != std::string::npos) out.push_back(part.substr(first, last - first + 1));
    start = end + 1;
  }
  return out;
}

}  // namespace exprun
