// Purpose: spdlog-backed implementation of exprun::log.
#include "runner/util/Log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

namespace exprun::log {
namespace {
int gRank = 0;
std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto lg = spdlog::stderr_color_mt("exprun");
    lg->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    return lg;
  }();
  return l;
}
std::string gStatus;  // the status line on screen ("" for none)

// Runs `emit` with the status line out of its way.
template <class F>
void aroundStatus(F emit) {
  if (gStatus.empty()) return emit();
  std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
  emit();
  std::fputs(gStatus.c_str(), stderr);
  std::fflush(stderr);
}
}  // namespace

void info(const std::string& msg) {
  if (gRank == 0) aroundStatus([&] { logger()->info(msg); });
}
void warn(const std::string& msg) {
  aroundStatus([&] { logger()->warn(msg); });
}
void error(const std::string& msg) {
  aroundStatus([&] { logger()->error(msg); });
}
void status(const std::string& text) {
  if (gRank != 0) return;
  std::fputs(("\r" + text + "\x1b[K").c_str(), stderr);
  if (text.empty()) std::fputs("\r", stderr);
  std::fflush(stderr);
  gStatus = text;
}
void setRank(int rank) {
  gRank = rank;
  if (rank > 0) logger()->set_pattern("[%H:%M:%S.%e] [%^%l%$] [rank " + std::to_string(rank) + "] %v");
}
void setLevel(const std::string& level) { logger()->set_level(spdlog::level::from_str(level)); }

}  // namespace exprun::log
