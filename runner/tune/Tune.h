// Purpose: `exprun tune` — the fastest configuration of a spec on this machine, found by measuring
// (cuDNN's benchmark mode one level up). Each trial is a short run of the trainer's own step on the
// spec's data (warm-up steps, then timed steps) in a child process. Torch-free: the measuring is a
// TrialFn.
// Rule: candidates change only what does not change what is learned beyond numeric precision, at
// the spec's global batch; recomputation only where a memory budget needs it.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runner/spec/Spec.h"

namespace exprun {

// Bad input to tune (exit 2): a budget too small for one trial, an unknown precision, a spec that
// cannot be tuned. Spec errors stay SpecError.
class TuneError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// What the machine offers the search.
struct TuneMachine {
  bool cuda = false;
  int cores = 1;                       // CPU threads shared by the processes of a layout
  int gpus = 0;                        // CUDA: processes = GPUs
  std::vector<Precision> native;       // precisions with native arithmetic (fp32 always)
  std::string description;             // for the output: "Intel(R) Xeon(R) ... (2 cores; ...)"
};

// One configuration: everything tune may change. Fields a spec cannot take stay at their "none".
struct Setting {
  int procs = 1;
  std::int64_t threads = 0;  // per process; 0: the spec's default (cores / processes)
  std::int64_t micro = 0, accumulate = 1;
  Precision precision = Precision::Fp32;
  bool channelsLast = false;
  int fused = -1;            // model.fused: 0/1, or -1 when the model has no such option
  std::int64_t workers = 2;
  std::string comm;          // distributed.comm.type
  double bucketMb = 0;       // distributed.comm.bucket_mb; 0: the comm plugin has none
  bool recompute = false;    // every stage recomputed block by block (activation_checkpointing: [all])
  std::int64_t globalBatch() const { return micro * procs * accumulate; }
  bool operator==(const Setting& o) const;
  bool operator!=(const Setting& o) const { return !(*this == o); }
};

std::string describe(const Setting& s);  // every field, one line
// What `to` changes from `from` ("bf16, channels_last, 1 process x 2 threads"); "-" when nothing.
std::string differences(const Setting& from, const Setting& to);
// The spec keys and YAML values that turn `written` into `s`, as "key=value" for --set.
std::vector<std::string> settingSets(const Setting& s, const Setting& written);
nlohmann::json settingJson(const Setting& s);

struct TuneOptions {
  double budgetS = 300;
  std::int64_t memoryBudgetBytes = 0;  // per process; 0: none
  int nproc = 1;                       // processes the spec is written for (its global batch)
  int maxProcs = 0;                    // CPU layouts up to this many processes (0: the cores)
  std::vector<Precision> precisions;   // empty: fp32 and the ones the device has natively
  bool allowLossyComm = false;
  std::int64_t warmupSteps = 3, minSteps = 8, maxSteps = 400;  // timed steps per trial: [min, max]
  // What the spec's task counts (set from the spec): images, or tokens (a language model: its
  // samples hold unitsPerSample of them, block_size; channels_last is not a knob there).
  std::string unit = "images";
  std::int64_t unitsPerSample = 1;
};

// "fp32,bf16" → precisions; TuneError naming an unknown one.
std::vector<Precision> parsePrecisions(const std::string& list);

// The spec as written, as a Setting (micro-batch: the spec's; auto needs train.global_batch).
Setting writtenSetting(const Spec& spec, const TuneMachine& machine, const TuneOptions& options);
// Stage 1: the written setting first, then process layout x precision x channels_last at the
// written global batch and accumulation (1 where a layout does not divide it); one changed knob
// first, then two, then three (a small budget keeps the front), the most promising first within.
std::vector<Setting> layoutCandidates(const Setting& written, const TuneMachine& machine, const TuneOptions& options);
// Stage 2: `best` first, then its one-knob neighbours (micro-batch x accumulation, fused, workers,
// buckets and, with allowLossyComm, compressing comm hooks when there are several processes;
// recomputation off when a memory budget is given).
std::vector<Setting> refineCandidates(const Setting& best, const TuneOptions& options);
// What to try when `s` does not fit the memory budget: the micro-batch halved (at the same global
// batch) until it is at most `fraction` of the one that did not fit (budget / peak measured: the
// peak taken as proportional to the micro-batch), at least once; at micro-batch 1 (or an odd one)
// recomputation of every stage, block by block; nullopt when nothing is left.
std::optional<Setting> smaller(const Setting& s, double fraction = 0.5);

struct TrialResult {
  bool ok = false;
  double imagesPerS = 0;      // over the timed steps (0: not measured)
  double mfu = -1;            // -1: unknown
  std::int64_t peakBytes = 0, tensorBytes = 0;  // the largest rank's training-step peaks
  double wallS = 0;           // the whole trial, start-up included
  double stepS = 0;           // seconds per timed step
  double overheadS = 0;       // wall time outside the timed steps (start-up, warm-up, exit)
  std::int64_t steps = 0;     // timed steps asked for
  std::string failure;        // why not ok
  int stage = 0, rung = 0;    // filled by the search
};
// Runs `s` for the warm-up and `steps` timed steps, within `limitS` seconds of wall time.
using TrialFn = std::function<TrialResult(const Setting& s, std::int64_t steps, double limitS)>;
using ClockFn = std::function<double()>;  // seconds, monotonic

struct CandidateRecord {
  Setting setting;
  std::vector<TrialResult> trials;
  int stage = 1;
  std::string status;  // "finalist", "dropped (stage S, rung R)", "over the memory budget", "failed: ...", "not tried"
  double median() const;  // median images/s of the successful trials (0: none)
  int successes() const;
  bool failed() const;     // a trial failed (an error, too slow, over the memory budget)
};

struct TuneOutcome {
  std::vector<CandidateRecord> candidates;  // ranked: the measured ones by median, best first
  int winner = -1, written = -1;            // indices into candidates
  double spentS = 0;
  std::vector<std::string> notes;           // what the search decided and why
  std::string unit = "images";              // what the candidates' throughput counts (TuneOptions::unit)
};

// The search. `stage1[0]` must be the spec as written; `refine` makes stage 2 from stage 1's winner.
// Successive halving in two stages: (1) layout x precision x channels_last, (2) one-knob neighbours
// of the winner and the winner with every stage-1 knob that helped alone; then more rounds of the
// two best until the budget is spent. Every rung alternates the order of its trials, finalists get
// two rounds, candidates are ranked by the median of their trials, and the number of timed steps is
// chosen so that the whole search fills the time budget. The winner must beat the spec as written
// by 3 %, else the spec stays as it is.
TuneOutcome runTune(const std::vector<Setting>& stage1,
                    const std::function<std::vector<Setting>(const Setting&)>& refine, const TrialFn& trial,
                    const TuneOptions& options, const ClockFn& clock);

// The ranked table printed at the end.
std::string tuneTable(const TuneOutcome& outcome, std::int64_t memoryBudgetBytes);
// Every trial, for --json.
nlohmann::json tuneJson(const TuneOutcome& outcome, const std::string& specPath, const TuneMachine& machine,
                        const TuneOptions& options);
// The command that runs a setting: "exprun run F" or "exprun launch --nproc-per-node P F".
std::string runCommand(const Setting& s, const std::string& specFile);
// The winner as a spec that `base:`s the original (relative to `tunedPath`'s folder), with the
// user's --set overrides and the winner's changes, and a comment with the measured alternatives.
std::string tunedSpecYaml(const TuneOutcome& outcome, const std::string& specPath, const std::string& tunedPath,
                          const std::string& name, const std::vector<std::string>& userSets,
                          const TuneMachine& machine);

}  // namespace exprun
