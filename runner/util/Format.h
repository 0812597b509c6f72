// Purpose: text for people and from people — printf-style formatting into a std::string, durations
// ("7 min 42 s"), sizes in GiB, and memory sizes given as text ("20GiB", "512 MiB", "1.5GB").
// Torch-free.
#pragma once

#include <cstdint>
#include <string>

namespace exprun {

// printf-style formatting into a std::string.
std::string strf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// "38.5 s", "7 min 42 s", "1 h 02 min" (rounded to the unit shown).
std::string formatDuration(double seconds);
// Bytes in GiB with one decimal ("1.5").
std::string formatGiB(std::int64_t bytes);
// "20GiB", "512 MiB", "1.5GB", "1000000" -> bytes; throws std::invalid_argument.
std::int64_t parseBytes(const std::string& text);

}  // namespace exprun
