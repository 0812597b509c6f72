// Purpose: the step breakdown's clock and the phase scopes (see Phases.h).
#include "runner/metrics/Phases.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#ifdef EXPRUN_WITH_CUDA
#include <c10/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace exprun {
namespace {

constexpr std::size_t kMaxPendingEvents = 4096;
std::atomic<PhaseClock*> active{nullptr};

double since(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

#ifdef EXPRUN_WITH_CUDA
struct PhaseClock::Events {
  c10::DeviceIndex device = 0;
  c10::cuda::CUDAEvent start{cudaEventDefault};  // with timing
  std::vector<std::pair<Phase, c10::cuda::CUDAEvent>> pending;  // (the phase that ended, its end)
  std::vector<c10::cuda::CUDAEvent> pool;                       // recorded before: reused
  c10::cuda::CUDAEvent take() {
    if (pool.empty()) return c10::cuda::CUDAEvent(cudaEventDefault);
    c10::cuda::CUDAEvent e = std::move(pool.back());
    pool.pop_back();
    return e;
  }
  void record(c10::cuda::CUDAEvent& e) const { e.record(c10::cuda::getCurrentCUDAStream(device)); }
};
#else
struct PhaseClock::Events {};
#endif

PhaseClock::PhaseClock(const torch::Device& device) {
#ifdef EXPRUN_WITH_CUDA
  if (device.is_cuda()) {
    events_ = std::make_unique<Events>();
    events_->device = device.index();
  }
#else
  (void)device;
#endif
  reset();
}

PhaseClock::~PhaseClock() = default;

void PhaseClock::reset() {
  totals_.fill(0.0);
  current_ = Phase::Rest;
  since_ = std::chrono::steady_clock::now();
#ifdef EXPRUN_WITH_CUDA
  if (events_) {
    for (auto& p : events_->pending) events_->pool.push_back(std::move(p.second));
    events_->pending.clear();
    events_->record(events_->start);
  }
#endif
}

Phase PhaseClock::enter(Phase p) {
  const Phase ended = current_;
#ifdef EXPRUN_WITH_CUDA
  if (events_) {
    c10::cuda::CUDAEvent e = events_->take();
    events_->record(e);
    events_->pending.emplace_back(ended, std::move(e));
    current_ = p;
    if (events_->pending.size() >= kMaxPendingEvents) resolve();
    return ended;
  }
#endif
  const auto now = std::chrono::steady_clock::now();
  totals_[static_cast<int>(ended)] += since(since_, now);
  since_ = now;
  current_ = p;
  return ended;
}

void PhaseClock::resolve() {
#ifdef EXPRUN_WITH_CUDA
  if (!events_ || events_->pending.empty()) return;
  events_->pending.back().second.synchronize();
  const c10::cuda::CUDAEvent* prev = &events_->start;
  for (auto& [phase, e] : events_->pending) {
    totals_[static_cast<int>(phase)] += static_cast<double>(prev->elapsed_time(e)) / 1000.0;
    prev = &e;
  }
  std::swap(events_->start, events_->pending.back().second);  // the last end starts what follows
  for (auto& p : events_->pending) events_->pool.push_back(std::move(p.second));
  events_->pending.clear();
#endif
}

PhaseSeconds PhaseClock::seconds() {
  if (events_) {
    enter(current_);  // the current phase up to here
    resolve();
    return totals_;
  }
  PhaseSeconds s = totals_;
  s[static_cast<int>(current_)] += since(since_, std::chrono::steady_clock::now());
  return s;
}

void PhaseClock::stepEnds() {
  if (events_ && everyStep_) {
    enter(current_);
    resolve();
  }
}

PhaseClock* activePhaseClock() { return active.load(std::memory_order_relaxed); }

bool phaseBreakdownOn() {
  static const bool on = [] {
    const char* v = std::getenv("EXPRUN_BREAKDOWN");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

ActivePhaseClock::ActivePhaseClock(PhaseClock* clock)
    : previous_(active.exchange(phaseBreakdownOn() ? clock : nullptr)) {}
ActivePhaseClock::~ActivePhaseClock() { active.store(previous_); }

const char* phaseRangeName(Phase p) {
  static const char* const names[kPhases] = {
      "exprun::data_wait", "exprun::h2d", "exprun::forward",    "exprun::backward", "exprun::recompute",
      "exprun::comm_exposed", "exprun::optimizer", "exprun::ema", "exprun::eval", "exprun::checkpoint",
      "exprun::rest",      "exprun::cuda_graph"};
  return names[static_cast<int>(p)];
}

PhaseScope::PhaseScope(Phase p) : clock_(activePhaseClock()) {
  if (!phaseBreakdownOn()) return;
  if (clock_) previous_ = clock_->enter(p);
  range_.emplace(at::RecordScope::USER_SCOPE);
  if (range_->isActive())
    range_->before(phaseRangeName(p), c10::ArrayRef<const c10::IValue>{});
  else
    range_.reset();
}

PhaseScope::~PhaseScope() {
  range_.reset();  // the range ends first (before the switch's own work)
  if (clock_) clock_->enter(previous_);
}

}  // namespace exprun
