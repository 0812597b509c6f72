// Purpose: the step breakdown's clock (runner/metrics/Breakdown.h) and the loop's phase scopes.
// A PhaseClock is in one phase at a time; entering another adds the time since the last switch to
// the phase that ends. A PhaseScope enters a phase for its lifetime and is also a profiler range, so
// the breakdown's phases appear in a trace (`exprun profile`).
// Rule: on a GPU the clock never synchronizes: a switch records a CUDA event, and the events are
// resolved into seconds only at the loop's existing flush points.
#pragma once

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <optional>

#include "runner/metrics/Breakdown.h"

namespace exprun {

// On the CPU it reads the steady clock. On a GPU each switch records a CUDA event on the current
// stream, with no synchronization, and the events are resolved into seconds (the device's own time
// between them) when seconds() is asked, which the loop does only at its flush points (a log line, a
// checkpoint, the epoch's end), and every 4096 switches so that the events stay few.
class PhaseClock {
 public:
  explicit PhaseClock(const torch::Device& device);
  ~PhaseClock();
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;
  // Starts again from zero, in Phase::Rest.
  void reset();
  // Switches to `p`; returns the phase that ended.
  Phase enter(Phase p);
  Phase current() const { return current_; }
  // Seconds in each phase since reset(), the current phase up to now (on a GPU: up to the work
  // queued so far, waiting for it).
  PhaseSeconds seconds();
  // On a GPU, resolve the events at every step boundary (the per-step CSV columns want exact
  // figures per step; it waits for the device once a step). No effect on the CPU.
  void resolveEveryStep(bool on) { everyStep_ = on; }
  void stepEnds();

 private:
  void resolve();  // GPU: the recorded events into totals_ (waits for the last)
  struct Events;   // the CUDA events (Phases.cpp), on a GPU only
  Phase current_ = Phase::Rest;
  PhaseSeconds totals_{};
  std::chrono::steady_clock::time_point since_;
  std::unique_ptr<Events> events_;
  bool everyStep_ = false;
};

// The clock the phase scopes time (null: none). Global, not thread-local: autograd runs backward
// (and recomputation) on its own thread for a GPU, while the loop's thread waits.
PhaseClock* activePhaseClock();
// False when EXPRUN_BREAKDOWN=0: no clock is made active and the scopes do nothing (not even the
// profiler range) — the run without the breakdown that bench/breakdown_overhead.sh compares with.
bool phaseBreakdownOn();
// Makes `clock` the active one while it lives (the previous one restored after).
class ActivePhaseClock {
 public:
  explicit ActivePhaseClock(PhaseClock* clock);
  ~ActivePhaseClock();
  ActivePhaseClock(const ActivePhaseClock&) = delete;
  ActivePhaseClock& operator=(const ActivePhaseClock&) = delete;

 private:
  PhaseClock* previous_;
};

// Enters a phase on the active clock and returns to the previous phase when it ends, so scopes nest
// (recomputation inside backward). It is also a profiler range named "exprun::<phase key>" (a
// RECORD_FUNCTION user scope); without an active clock it is only the profiler range.
class PhaseScope {
 public:
  explicit PhaseScope(Phase p);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseClock* clock_;
  Phase previous_ = Phase::Rest;
  std::optional<at::RecordFunction> range_;
};

// The profiler range's name of a phase: "exprun::data_wait", ...
const char* phaseRangeName(Phase p);

}  // namespace exprun
