// Purpose: the sinks of a run (see Sinks.h).
#include "runner/live/Sinks.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "runner/util/AtomicFile.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

const char* kCsvHeader = "step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s";

std::string csvHeader(bool breakdown) {
  std::string h = kCsvHeader;
  if (breakdown)
    for (std::size_t i = 0; i < kPhases; ++i) h += std::string(",") + phaseKey(phaseAt(i)) + "_s";
  return h + "\n";
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
  log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f img/s  ETA %s",
                 static_cast<long long>(p.epoch), static_cast<long long>(run_.epochs),
                 static_cast<long long>(p.stepsInEpoch), static_cast<long long>(run_.stepsPerEpoch), p.loss, p.lr,
                 p.imagesPerS, formatDuration(p.etaS).c_str()));
}

void LogLines::evaluation(const EvalRecord& e) {
  log::info(strf("evaluation at step %lld (epoch %lld, %.1f s into the run): val loss %.4f top1 %.2f%% top5 %.2f%%",
                 static_cast<long long>(e.step), static_cast<long long>(e.epoch), e.timeS, e.valLoss, e.valTop1,
                 e.valTop5));
}

void LogLines::epochEnds(const EpochRecord& r, std::int64_t) {
  log::info(
      strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | %s | "
           "%.0f img/s, data wait %.2f s, comm wait %.2f s, peak memory %.1f MiB (tensors %.1f MiB)%s, MFU %s%s",
           static_cast<long long>(r.epoch), formatDuration(r.timeS).c_str(), r.trainLoss, r.trainTop1,
           // no evaluation in the epoch (train.eval: false): no validation figures to show
           r.evalPeakMemoryBytes < 0
               ? "no evaluation"
               : strf("val loss %.4f top1 %.2f%% top5 %.2f%%", r.valLoss, r.valTop1, r.valTop5).c_str(),
           r.imagesPerS, r.dataWaitS, r.commWaitS, r.peakMemoryBytes / 1048576.0,
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
  log::status(strf("epoch %lld/%lld [%s%s] %lld/%lld  loss %.4f  %.0f img/s  ETA %s", static_cast<long long>(p.epoch),
                   static_cast<long long>(run_.epochs), std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), static_cast<long long>(p.stepsInEpoch),
                   static_cast<long long>(run_.stepsPerEpoch), p.loss, p.imagesPerS, formatDuration(p.etaS).c_str()));
}

void ProgressBar::finish() { log::status(""); }

StepsCsv::StepsCsv(const std::string& path, std::int64_t keepBytes, std::int64_t step, std::int64_t epoch, bool breakdown)
    : breakdown_(breakdown), file_(path, csvBytesThrough(path, keepBytes, step, epoch), csvHeader(breakdown)) {}

void StepsCsv::step(const StepRecord& r) {
  std::string row = strf("%lld,%lld,%.9g,%.9g,%.6g,%.9g,%.9g,%.6g,%.6g,%.6f", static_cast<long long>(r.step),
                         static_cast<long long>(r.epoch), r.loss, r.lr, r.imagesPerS, r.gradNorm, r.lossScale,
                         r.dataWaitS, r.commWaitS, r.runSeconds);
  if (breakdown_)
    for (double s : r.phases) row += strf(",%.6g", s);
  file_.add(row + "\n");
}

void TensorBoardEvents::step(const StepRecord& r) {
  file_.scalars(r.step,
                {{"train/loss", static_cast<float>(r.loss)},
                 {"train/lr", static_cast<float>(r.lr)},
                 {"train/images_per_s", static_cast<float>(r.imagesPerS)},
                 {"train/grad_norm", static_cast<float>(r.gradNorm)},
                 {"train/loss_scale", static_cast<float>(r.lossScale)}},
                r.wallTime);
}

void TensorBoardEvents::evaluation(const EvalRecord& e) {
  file_.scalars(e.step,
                {{"val/top1", static_cast<float>(e.valTop1)},
                 {"val/top5", static_cast<float>(e.valTop5)},
                 {"val/loss", static_cast<float>(e.valLoss)},
                 {"val/time_s", static_cast<float>(e.timeS)}},
                wallClock());
}

void TensorBoardEvents::epochEnds(const EpochRecord& r, std::int64_t step) {
  std::vector<Scalar> v{{"epoch/train_loss", static_cast<float>(r.trainLoss)},
                        {"epoch/train_top1", static_cast<float>(r.trainTop1)},
                        {"epoch/time_s", static_cast<float>(r.timeS)},
                        {"epoch/images_per_s", static_cast<float>(r.imagesPerS)},
                        {"epoch/peak_memory_bytes", static_cast<float>(r.peakMemoryBytes)},
                        {"epoch/peak_allocated_bytes", static_cast<float>(r.peakAllocatedBytes)},
                        {"epoch/flops_per_s", static_cast<float>(r.flopsPerS)}};
  if (r.mfu <= 1) v.push_back({"epoch/mfu", static_cast<float>(r.mfu)});  // above 1 the peak was wrong: no figure
  if (r.valTop1Ema) v.push_back({"epoch/val_top1_ema", static_cast<float>(*r.valTop1Ema)});
  if (r.evalPeakAllocatedBytes >= 0)
    v.push_back({"epoch/eval_peak_allocated_bytes", static_cast<float>(r.evalPeakAllocatedBytes)});
  if (!r.breakdown.empty()) {  // one tag per phase: seconds in the epoch, mean over ranks
    for (std::size_t i = 0; i < kPhases; ++i)
      v.push_back({std::string("time/") + phaseKey(phaseAt(i)) + "_s", static_cast<float>(r.breakdown.mean[i])});
    if (r.breakdown.commOverlap) v.push_back({"time/comm_overlap", static_cast<float>(*r.breakdown.commOverlap)});
  }
  file_.scalars(step, v, wallClock());
}

}  // namespace exprun
