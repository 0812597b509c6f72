// Purpose: exprun's logging API (spdlog underneath, in Log.cpp only: torch ships its own fmt, so
// torch translation units format their text themselves and call these).
#pragma once

#include <string>

#include "runner/util/Format.h"  // strf: every message is formatted with it

namespace exprun::log {

void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);
// Messages go to stderr; rank > 0 is silenced for info (rank 0 logs, every rank errors).
void setRank(int rank);
void setLevel(const std::string& level);  // "debug", "info", "warn", "error", "off"
// A status line (the progress bar) redrawn in place on stderr: every message clears it first and
// draws it again after itself (as tqdm.write does). Rank 0 only; an empty text removes it.
void status(const std::string& text);

}  // namespace exprun::log
