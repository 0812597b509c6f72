// Purpose: one trial of `exprun tune` — the spec with a candidate's overrides run as a child
// process (`exprun run`, or `exprun launch --nproc-per-node P` for several processes) for a few
// warm-up steps and the timed steps, without evaluation, checkpoints or TensorBoard, its output in
// <work>/trial-N.log; its speed read from the per-step CSV (the run clock after each step: data
// waits and gradient exchange included), its memory and MFU from the result file. A trial past its
// time limit is stopped (SIGTERM to its process group, SIGKILL 15 s later) and counts as too slow.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runner/tune/Tune.h"

namespace exprun {

// SIGINT/SIGTERM during a trial stop it and end the search with this (exit 130).
class TuneInterrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TrialRunner {
  std::string exe;                    // the exprun executable
  std::string specPath;
  std::vector<std::string> userSets;  // the user's --set, under every candidate
  Setting written;                    // the candidates' overrides are what differs from it
  std::string workDir;
  std::int64_t warmupSteps = 3;
  std::int64_t unitsPerSample = 1;    // what a sample counts in the throughput (TuneOptions::unitsPerSample)
};

// Runs trial number `number` of `s`; the result's ok is false (with the reason) when the run
// failed, was too slow, or wrote too few steps to time.
TrialResult runTrial(const TrialRunner& runner, const Setting& s, std::int64_t steps, double limitS, int number);

// The command-line arguments of that trial (after the executable).
std::vector<std::string> trialArguments(const TrialRunner& runner, const Setting& s, std::int64_t steps,
                                        const std::string& name);

// Speed from a per-step CSV (runner/live/Sinks.cpp's columns): images/s over the steps after
// `warmup`, seconds per step, and the wall time outside those steps.
TrialResult timingFromCsv(const std::string& csv, std::int64_t warmup, std::int64_t globalBatch, double wallS);

// The clock trials and the search are timed by: seconds, monotonic.
double monotonicSeconds();

// Installs SIGINT/SIGTERM handlers for the search (restored on destruction).
class TrialSignals {
 public:
  TrialSignals();
  ~TrialSignals();
  TrialSignals(const TrialSignals&) = delete;
  TrialSignals& operator=(const TrialSignals&) = delete;
};

}  // namespace exprun
