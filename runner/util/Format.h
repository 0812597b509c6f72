// Purpose: text for people and from people — printf-style formatting into a std::string, durations
// ("7 min 42 s"), sizes in GiB, memory sizes and durations given as text ("20GiB", "5min"), lists.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace exprun {

// printf-style formatting into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "38.5 s", "7 min 42 s", "1 h 02 min" (rounded to the unit shown).
std::string formatDuration(double seconds);
// Bytes in GiB / MiB with one decimal ("1.5").
std::string formatGiB(std::int64_t bytes);
std::string formatMiB(std::int64_t bytes);
// One unit for a table or chart of byte counts, chosen by its largest: MiB below 1 GiB (so that
// 200 MiB does not read "0.2"), GiB from there; `format` gives one decimal in MiB, two in GiB.
struct ByteUnit {
  const char* name;      // "MiB" or "GiB"
  double bytes;          // bytes per unit
  const char* decimals;  // printf format of the number: "%.1f" or "%.2f"
  std::string format(std::int64_t n) const;
  double value(std::int64_t n) const { return static_cast<double>(n) / bytes; }
};
ByteUnit byteUnitFor(std::int64_t largest);
// "20GiB", "512 MiB", "1.5GB", "1000000" -> bytes; throws std::invalid_argument.
std::int64_t parseBytes(const std::string& text);
// "300", "90s", "90 s", "5min", "5 min", "1.5h" -> seconds; throws std::invalid_argument.
double parseDuration(const std::string& text);

// The parts joined with `sep`; the text split at `sep` (empty parts dropped, spaces trimmed).
std::string joinStrings(const std::vector<std::string>& parts, const std::string& sep);
std::vector<std::string> splitString(const std::string& text, char sep);

}  // namespace exprun
