// Purpose: the step breakdown's vocabulary — where an epoch's time goes, in named phases: data
// wait, host-to-device copy, forward (the loss included), backward (and, inside it, the forward
// recomputation of checkpointed stages), exposed communication (the gradient exchange the step
// waits for after backward), the optimizer step (zeroing, the non-finite check, unscale, clip,
// step, loss-scale update), EMA, evaluation, checkpoint saves and the rest (the loop's own work:
// metrics, methods' hooks, logging). A rank's clock is in one phase at a time (PhaseClock,
// runner/metrics/Phases.h), so its phases add up to its epoch. The epoch's record keeps, per phase,
// the slowest rank's seconds and the mean over ranks (EpochBreakdown). Torch-free.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>

namespace exprun {

// Graph: a replayed CUDA graph of the whole step (train.cuda_graph: forward, backward and optimizer).
enum class Phase : int { DataWait, Copy, Forward, Backward, Recompute, Comm, Optimizer, Ema, Eval, Checkpoint, Rest, Graph };
inline constexpr std::size_t kPhases = 12;
using PhaseSeconds = std::array<double, kPhases>;

// The phase's key in result files, TensorBoard tags ("time/<key>_s") and the CSV ("<key>_s").
inline const char* phaseKey(Phase p) {
  static const char* const keys[kPhases] = {"data_wait", "h2d",  "forward", "backward",   "recompute", "comm_exposed",
                                            "optimizer", "ema", "eval",    "checkpoint", "rest",      "cuda_graph"};
  return keys[static_cast<int>(p)];
}
// A short label (the epoch line, the report's bars).
inline const char* phaseLabel(Phase p) {
  static const char* const labels[kPhases] = {"data", "h2d",  "fwd",  "bwd",  "recompute", "comm",
                                              "opt",  "ema", "eval", "ckpt", "rest",      "graph"};
  return labels[static_cast<int>(p)];
}
inline Phase phaseAt(std::size_t i) { return static_cast<Phase>(static_cast<int>(i)); }
// The phases an epoch's time is the sum of, as reported: every phase but Recompute, which the
// reported backward includes (it runs inside backward) and which is shown apart.
inline bool isSummand(Phase p) { return p != Phase::Recompute; }

// The phases as a record shows them: backward with the recomputation inside it.
inline PhaseSeconds reported(PhaseSeconds s) {
  s[static_cast<int>(Phase::Backward)] += s[static_cast<int>(Phase::Recompute)];
  return s;
}
// The sum of the reported phases (recomputation counted once, inside backward).
inline double summedSeconds(const PhaseSeconds& reportedSeconds) {
  double t = 0;
  for (std::size_t i = 0; i < kPhases; ++i)
    if (isSummand(phaseAt(i))) t += reportedSeconds[i];
  return t;
}

// An epoch's breakdown over the ranks. `max` and `mean`: each reported phase's seconds, the slowest
// rank's and the mean over ranks; `epochS`: the slowest rank's sum (its epoch, evaluation and
// checkpoint saves included), `meanEpochS` the mean over ranks; a phase's fraction of the epoch is
// its mean over the mean epoch. `commOverlap`: the share of the gradient exchange hidden behind
// backward, 1 - exposed / in flight (first bucket handed over -> exchange finished), mean over
// ranks; measured on the host clock only (absent on a GPU and for a single process). `clock`:
// "host" (steady clock) or "cuda events" (the device's own time, read at the existing flush points).
struct EpochBreakdown {
  PhaseSeconds max{}, mean{};
  double epochS = 0, meanEpochS = 0;  // the sum of a rank's phases: the slowest rank's, the mean
  std::optional<double> commOverlap;
  std::string clock = "host";
  bool empty() const { return epochS <= 0; }
  double fraction(Phase p) const { return meanEpochS > 0 ? mean[static_cast<int>(p)] / meanEpochS : 0.0; }
};

}  // namespace exprun
