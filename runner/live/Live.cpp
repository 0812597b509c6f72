// Purpose: log lines, progress bar, per-step CSV and TensorBoard files of a run (see Live.h).
#include "runner/live/Live.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include "runner/util/Log.h"
#include "runner/util/AtomicFile.h"

namespace exprun {
namespace {

double wallClock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

const char* kCsvHeader = "step,epoch,loss,lr,images_per_s,grad_norm,loss_scale,data_wait_s,comm_wait_s,time_s\n";
constexpr std::size_t kMaxRows = 256;  // rows kept on the device before a flush

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

bool progressBarWanted() {
  if (const char* v = std::getenv("EXPRUN_PROGRESS"); v && *v) return std::string(v) != "0";
  return ::isatty(2) == 1;
}

LiveMetrics::LiveMetrics(const TrainSetup& s, const std::string& outDir, Dist& dist, const TrainPosition& start)
    : s_(s),
      dist_(dist),
      rank_(dist.rank()),
      world_(dist.worldSize()),
      shared_(dist.active() && !outDir.empty() && (s.spec.output.stepsCsv || s.spec.output.tensorboard)),
      bar_(rank_ == 0 && progressBarWanted()),
      firstStep_(start.step) {
  const std::string& dir = outDir;
  const std::string csvPath = dir + "/" + s.spec.name + ".steps.csv";
  if (rank_ == 0 && !dir.empty() && s.spec.output.stepsCsv)
    csv_ = std::make_unique<AppendFile>(csvPath, csvBytesThrough(csvPath, start.csvBytes, start.step, start.epoch), kCsvHeader);
  if (rank_ == 0 && !dir.empty() && s.spec.output.tensorboard)
    events_ = std::make_unique<EventFile>(dir + "/tensorboard/" + s.spec.name + "/events.out.tfevents.exprun",
                                          start.eventBytes);
  recording_ = csv_ || events_ || bar_ || shared_;
}

void LiveMetrics::epochBegins(const Progress& at, double runSeconds) {
  flush();
  last_.runSeconds = runSeconds;
  last_.normSum = at.meters.normSum;
  last_.samples = at.meters.samples;
  last_.dataWait = at.meters.dataWait;
  last_.commWait = at.meters.commWait;
}

void LiveMetrics::afterStep(const EpochRun& epoch, const TrainPosition& pos, const torch::Tensor& loss, double lr,
                            double runSeconds) {
  if (!recording_) return;
  if (firstSeconds_ < 0) firstSeconds_ = runSeconds - 1e-9;
  const EpochMeters& m = epoch.meters();
  rows_.push_back(Row{pos.step, pos.epoch, m.samples, lr, epoch.dataWaitSoFar(), m.commWait, wallClock(), runSeconds,
                      s_.parts.scaler->scaleValue(), loss, epoch.sums().normSum.clone()});
  if (rows_.size() >= kMaxRows) flush();  // at the same step on every rank
  if (bar_ && runSeconds - barDrawn_ >= 0.25) {
    if (shared_) {  // no flush here (the other ranks are not flushing): rank 0's own loss of the step
      const torch::Tensor l = loss.to(torch::kCPU);
      lastLoss_ = l[0].item<double>() / std::max(1.0, l[1].item<double>());
    } else {
      flush();
    }
    drawBar(epoch, pos, runSeconds);
  }
}

void LiveMetrics::drawBar(const EpochRun& epoch, const TrainPosition& pos, double runSeconds) {
  barDrawn_ = runSeconds;
  const std::int64_t inEpoch = epoch.meters().steps, ofEpoch = s_.stepsPerEpoch;
  const int width = 24;
  const int filled = static_cast<int>(width * std::min<double>(1.0, static_cast<double>(inEpoch) / ofEpoch));
  const double rate = (runSeconds - firstSeconds_) / std::max<std::int64_t>(1, pos.step - firstStep_);
  const double imagesPerS = static_cast<double>(s_.globalBatch) / std::max(rate, 1e-9);
  log::status(strf("epoch %lld/%lld [%s%s] %lld/%lld  loss %.4f  %.0f img/s  ETA %s",
                   static_cast<long long>(pos.epoch), static_cast<long long>(s_.spec.train.epochs),
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   static_cast<long long>(inEpoch), static_cast<long long>(ofEpoch), lastLoss_, imagesPerS,
                   formatDuration(rate * static_cast<double>(s_.totalSteps - pos.step)).c_str()));
}

void LiveMetrics::progressLine(const Progress& now, double lr, double runSeconds) {
  if (bar_) return;
  const EpochMeters& m = now.meters;
  const std::int64_t step = now.position.step;
  const double eta = runSeconds / std::max<std::int64_t>(1, step - firstStep_) * (s_.totalSteps - step);
  log::info(strf("epoch %lld/%lld step %lld/%lld  loss %.4f  lr %.4g  %.0f img/s  ETA %s",
                 static_cast<long long>(now.position.epoch), static_cast<long long>(s_.spec.train.epochs),
                 static_cast<long long>(m.steps), static_cast<long long>(s_.stepsPerEpoch),
                 m.lossSum / std::max<std::int64_t>(1, m.samples), lr, static_cast<double>(m.samples * world_) / std::max(m.elapsed, 1e-9),
                 formatDuration(eta).c_str()));
}

void LiveMetrics::evaluation(const EvalRecord& e) {
  flush();
  last_.runSeconds = e.timeS;  // the next step's images/s without the evaluation's time
  log::info(strf("evaluation at step %lld (epoch %lld, %.1f s into the run): val loss %.4f top1 %.2f%% top5 %.2f%%",
                 static_cast<long long>(e.step), static_cast<long long>(e.epoch), e.timeS, e.valLoss, e.valTop1,
                 e.valTop5));
  if (events_)
    events_->scalars(e.step,
                     {{"val/top1", static_cast<float>(e.valTop1)},
                      {"val/top5", static_cast<float>(e.valTop5)},
                      {"val/loss", static_cast<float>(e.valLoss)},
                      {"val/time_s", static_cast<float>(e.timeS)}},
                     wallClock());
}

void LiveMetrics::epochEnds(const EpochRecord& r, std::int64_t step) {
  log::info(
      strf("epoch %lld done in %s: train loss %.4f top1 %.2f%% | val loss %.4f top1 %.2f%% top5 %.2f%% | "
           "%.0f img/s, data wait %.2f s, comm wait %.2f s, peak memory %.1f MiB (tensors %.1f MiB), MFU %.1f%%",
           static_cast<long long>(r.epoch), formatDuration(r.timeS).c_str(), r.trainLoss, r.trainTop1, r.valLoss,
           r.valTop1, r.valTop5, r.imagesPerS, r.dataWaitS, r.commWaitS, r.peakMemoryBytes / 1048576.0,
           std::max<std::int64_t>(0, r.peakAllocatedBytes) / 1048576.0, 100 * r.mfu));
  if (!events_) return;
  std::vector<Scalar> v{{"epoch/train_loss", static_cast<float>(r.trainLoss)},
                        {"epoch/train_top1", static_cast<float>(r.trainTop1)},
                        {"epoch/time_s", static_cast<float>(r.timeS)},
                        {"epoch/images_per_s", static_cast<float>(r.imagesPerS)},
                        {"epoch/peak_memory_bytes", static_cast<float>(r.peakMemoryBytes)},
                        {"epoch/peak_allocated_bytes", static_cast<float>(r.peakAllocatedBytes)},
                        {"epoch/mfu", static_cast<float>(r.mfu)},
                        {"epoch/flops_per_s", static_cast<float>(r.flopsPerS)}};
  if (r.valTop1Ema) v.push_back({"epoch/val_top1_ema", static_cast<float>(*r.valTop1Ema)});
  events_->scalars(step, v, wallClock());
}

void LiveMetrics::flush(TrainPosition* p) {
  if (!rows_.empty()) {
    std::vector<torch::Tensor> loss, norm;
    for (const Row& r : rows_) loss.push_back(r.loss), norm.push_back(r.normSum);
    torch::Tensor losses = torch::stack(loss);  // rows x (loss sum, samples)
    if (shared_) dist_.sumInPlace(losses);
    losses = losses.to(torch::kCPU, torch::kDouble).contiguous();
    const torch::Tensor norms = torch::stack(norm).to(torch::kCPU, torch::kDouble);
    const double* l = losses.data_ptr<double>();
    const double* n = norms.data_ptr<double>();
    for (std::size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      const std::int64_t samples = r.samples - last_.samples;
      const double seconds = r.runSeconds - last_.runSeconds;
      const double stepLoss = l[2 * i] / std::max(1.0, l[2 * i + 1]);
      const double gradNorm = n[i] - last_.normSum;
      const double imagesPerS = static_cast<double>(samples * world_) / std::max(seconds, 1e-9);
      if (csv_)
        csv_->add(strf("%lld,%lld,%.9g,%.9g,%.6g,%.9g,%.9g,%.6g,%.6g,%.6f\n", static_cast<long long>(r.step),
                       static_cast<long long>(r.epoch), stepLoss, r.lr, imagesPerS, gradNorm, r.lossScale,
                       r.dataWait - last_.dataWait, r.commWait - last_.commWait, r.runSeconds));
      if (events_) {
        events_->scalars(r.step,
                         {{"train/loss", static_cast<float>(stepLoss)},
                          {"train/lr", static_cast<float>(r.lr)},
                          {"train/images_per_s", static_cast<float>(imagesPerS)},
                          {"train/grad_norm", static_cast<float>(gradNorm)},
                          {"train/loss_scale", static_cast<float>(r.lossScale)}},
                         r.wallTime);
      }
      lastLoss_ = stepLoss;
      last_ = Last{n[i], r.dataWait, r.commWait, r.runSeconds, r.samples};
    }
    rows_.clear();
  }
  if (csv_) csv_->flush();
  if (events_) events_->flush();
  if (p) {
    p->csvBytes = csv_ ? csv_->bytes() : -1;
    p->eventBytes = events_ ? events_->bytes() : -1;
  }
}

void LiveMetrics::finish() {
  flush();
  if (bar_) log::status("");
}

}  // namespace exprun
