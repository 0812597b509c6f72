// Purpose: the sinks of a run (see Sinks.h).
#include "runner/live/Sinks.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "runner/live/MetricNames.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

std::vector<Scalar> scalars(const MetricRows& rows) {
  std::vector<Scalar> v;
  for (const MetricValue& m : rows) v.push_back({m.name, static_cast<float>(m.value)});
  return v;
}

// The epoch line's breakdown: each phase's share of the epoch (mean over ranks), those of 0.5 % and
// more, recomputation as part of backward, and the exchange hidden behind backward.
std::string breakdownLine(const EpochBreakdown& b) {
  if (b.empty()) return "";
  std::string out = " | time:";
  for (std::size_t i = 0; i < kPhases; ++i) {
    const Phase p = phaseAt(i);
    const double f = b.fraction(p);
    if (f < 0.005) continue;
    out += p == Phase::Recompute ? strf(" (recompute %.0f%%)", 100 * f) : strf(" %s %.0f%%", phaseLabel(p), 100 * f);
    if (p == Phase::Comm && b.commOverlap) out += strf(" (%.0f%% hidden)", 100 * *b.commOverlap);
  }
  return out;
}

// The per-step file's first `keepBytes` (what the checkpoint recorded; < 0: a new file) without
// the rows of epoch `epoch` after step `step`: a run resumed with another global batch counts the
// epoch's steps anew, in steps of the new size (earlier epochs' rows keep their numbers). Returns
// the bytes to keep.
std::int64_t csvBytesThrough(const std::string& path, std::int64_t keepBytes, std::int64_t step, std::int64_t epoch) {
  if (keepBytes < 0) return keepBytes;
  std::ifstream in(path, std::ios::binary);
  if (!in) return keepBytes;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.resize(std::min<std::size_t>(text.size(), static_cast<std::size_t>(keepBytes)));
  for (std::size_t at = text.find('\n'); at != std::string::npos && at + 1 < text.size(); at = text.find('\n', at + 1)) {
    const char* row = text.c_str() + at + 1;  // "step,epoch,..."
    char* end = nullptr;
    const long long rowStep = std::strtoll(row, &end, 10);
    if (end == row || *end != ',') continue;
    const long long rowEpoch = std::strtoll(end + 1, nullptr, 10);
    if (rowEpoch >= epoch && rowStep > step) {
      writeFileAtomically(path, text.substr(0, at + 1));
      return static_cast<std::int64_t>(at + 1);
    }
  }
  return keepBytes;
}

}  // namespace

double wallClock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool progressBarWanted() {
  if (const char* v = std::getenv("EXPRUN_PROGRESS"); v && *v) return std::string(v) != "0";
  return ::isatty(2) == 1;
}

void LogLines::progress(const ProgressReport& p) {
  log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f %s/s  ETA %s",
                 static_cast<long long>(p.epoch), static_cast<long long>(run_.epochs),
                 static_cast<long long>(p.stepsInEpoch), static_cast<long long>(run_.stepsPerEpoch), p.loss, p.lr,
                 p.imagesPerS, run_.unit.c_str(), formatDuration(p.etaS).c_str()));
}

void LogLines::evaluation(const EvalRecord& e) {
  log::info(strf("evaluation at step %lld (epoch %lld, %.1f s into the run): val loss %.4f top1 %.2f%% top5 %.2f%%",
                 static_cast<long long>(e.step), static_cast<long long>(e.epoch), e.timeS, e.valLoss, e.valTop1,
                 e.valTop5));
}

void LogLines::epochEnds(const EpochRecord& r, std::int64_t) {
  log::info(
      strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | %s | "
           "%.0f %s, data wait %.2f s, comm wait %.2f s, peak memory %.1f MiB (tensors %.1f MiB)%s, MFU %s%s",
           static_cast<long long>(r.epoch), formatDuration(r.timeS).c_str(), r.trainLoss, r.trainTop1,
           // no evaluation in the epoch (train.eval: false): no validation figures to show
           r.evalPeakMemoryBytes < 0
               ? "no evaluation"
           : r.valPerplexity ? strf("val loss %.4f perplexity %.2f token accuracy %.2f%%", r.valLoss, *r.valPerplexity, r.valTop1).c_str()
                             : strf("val loss %.4f top1 %.2f%% top5 %.2f%%", r.valLoss, r.valTop1, r.valTop5).c_str(),
           r.tokensPerS ? *r.tokensPerS : r.imagesPerS, r.tokensPerS ? "tokens/s" : "img/s", r.dataWaitS, r.commWaitS, r.peakMemoryBytes / 1048576.0,
           std::max<std::int64_t>(0, r.peakAllocatedBytes) / 1048576.0,
           r.evalPeakMemoryBytes < 0 ? ""
                                     : strf(" training, %.1f MiB (tensors %.1f MiB) evaluating",
                                            r.evalPeakMemoryBytes / 1048576.0,
                                            std::max<std::int64_t>(0, r.evalPeakAllocatedBytes) / 1048576.0)
                                           .c_str(),
           formatMfu(r.mfu).c_str(), breakdownLine(r.breakdown).c_str()));
}

void ProgressBar::status(const ProgressReport& p) {
  const int width = 24;
  const double done = static_cast<double>(p.stepsInEpoch) / static_cast<double>(std::max<std::int64_t>(1, run_.stepsPerEpoch));
  const int filled = static_cast<int>(width * std::min(1.0, done));
  log::status(strf("epoch %lld/%lld [%s%s] %lld/%lld  loss %.4f  %.0f %s/s  ETA %s", static_cast<long long>(p.epoch),
                   static_cast<long long>(run_.epochs), std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<long long>(p.stepsInEpoch),
                   static_cast<long long>(run_.stepsPerEpoch), p.loss, p.imagesPerS, run_.unit.c_str(),
                   formatDuration(p.etaS).c_str()));
}

void ProgressBar::finish() { log::status(""); }

StepsCsv::StepsCsv(const std::string& path, std::int64_t keepBytes, std::int64_t step, std::int64_t epoch, bool breakdown,
                   bool tokens)
    : breakdown_(breakdown), file_(path, csvBytesThrough(path, keepBytes, step, epoch), stepsCsvHeader(breakdown, tokens)) {}

void StepsCsv::step(const StepRecord& r) { file_.add(stepsCsvRow(r, breakdown_)); }

void TensorBoardEvents::step(const StepRecord& r) { file_.scalars(r.step, scalars(stepMetrics(r)), r.wallTime); }

void TensorBoardEvents::evaluation(const EvalRecord& e) { file_.scalars(e.step, scalars(evalMetrics(e)), wallClock()); }

void TensorBoardEvents::epochEnds(const EpochRecord& r, std::int64_t step) {
  file_.scalars(step, scalars(epochMetrics(r)), wallClock());
}

}  // namespace exprun
