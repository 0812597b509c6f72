// Purpose: tune's search (runTune in Tune.h): successive halving in two stages within a time
// budget. Each rung runs its candidates' trials in alternating order (forward, then reversed in
// the next round), ranks them by the median images/s of all their trials so far and keeps the top
// half (stage 1 always keeps the spec as written, so that its figure is as well measured as the
// winner's); the last rung (three candidates or fewer) runs two rounds. The timed steps per trial
// are chosen before each rung so that the rungs left fill the stage's share of the budget; where
// even the fewest steps do not fit, the front of the candidate list (the most promising) is kept.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "runner/tune/Tune.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"

namespace exprun {
namespace {

constexpr double kMinGain = 0.03;

std::string mib(std::int64_t bytes) { return formatMiB(bytes) + " MiB"; }

struct Rung {
  std::size_t size;
  int rounds;
};

// The rungs of a halving over n candidates (one extra kept when `keepOne`).
std::vector<Rung> schedule(std::size_t n, bool keepOne) {
  std::vector<Rung> r;
  while (n > 3) {
    r.push_back({n, 1});
    n = (n + 1) / 2 + (keepOne ? 1 : 0);
    if (keepOne && n >= r.back().size) n = r.back().size - 1;
  }
  r.push_back({n, 2});
  return r;
}

class Search {
 public:
  Search(const TrialFn& trial, const TuneOptions& o, const ClockFn& clock)
      : trial_(trial), o_(o), clock_(clock), start_(clock()) {}

  TuneOutcome run(const std::vector<Setting>& stage1, const std::function<std::vector<Setting>(const Setting&)>& refine);

 private:
  double now() const { return clock_() - start_; }
  int record(const Setting& s, int stage);
  double costOf(int idx, std::int64_t steps) const;
  bool measure(int idx, std::int64_t steps, int stage, int rung, std::vector<int>* alive);
  double stepsFor(const std::vector<int>& alive, const std::vector<Rung>& rungs, double end) const;
  void round(std::vector<int>& alive, std::int64_t steps, int stage, int rung);
  bool failed(int idx) const;
  std::vector<int> halve(std::vector<int> alive, std::size_t keep, int stage, int rung, int keepIdx);
  int halving(std::vector<int> alive, int stage, double end, int keepIdx);
  int best(int minTrials) const;
  void calibrate(int written);
  void polish();
  std::optional<Setting> mergeGains(const std::vector<int>& stage1, int winner) const;
  TuneOutcome outcome(int written);

  const TrialFn& trial_;
  const TuneOptions& o_;
  const ClockFn& clock_;
  double start_;
  std::vector<CandidateRecord> recs_;
  std::vector<std::string> notes_;
  double overheadS_ = 0, stepS_ = 0;  // the spec as written's first trial: the cost model's default
  int round_ = 0;                     // trials' order alternates with every round
  bool outOfTime_ = false;
};

int Search::record(const Setting& s, int stage) {
  for (std::size_t i = 0; i < recs_.size(); ++i)
    if (recs_[i].setting == s) return static_cast<int>(i);
  CandidateRecord r;
  r.setting = s;
  r.stage = stage;
  r.status = "not tried (time budget)";
  recs_.push_back(r);
  return static_cast<int>(recs_.size()) - 1;
}

// Seconds a trial of `steps` timed steps of candidate `idx` should take: its own last trial's
// figures when it has one, else the spec as written's.
double Search::costOf(int idx, std::int64_t steps) const {
  const auto& t = recs_[idx].trials;
  for (auto it = t.rbegin(); it != t.rend(); ++it)
    if (it->stepS > 0) return it->overheadS + static_cast<double>(steps) * it->stepS;
  return overheadS_ + static_cast<double>(steps) * stepS_;
}

// One trial; false when the budget has no room for it. A trial over the memory budget puts the
// candidate's smaller sibling (runner/tune/Tune.h: smaller) into `alive`.
bool Search::measure(int idx, std::int64_t steps, int stage, int rung, std::vector<int>* alive) {
  const double expected = costOf(idx, steps);
  const double left = o_.budgetS - now();
  if (expected > left) {
    outOfTime_ = true;
    return false;
  }
  // A trial may take three times what it should (at least 5 s more) before it is stopped as too
  // slow; the first one, which makes the cost model, has the whole budget.
  const double limit = stepS_ > 0 ? std::min(std::max(3 * expected, expected + 5), left + 0.1 * o_.budgetS) : left;
  const Setting setting = recs_[idx].setting;
  const std::string what = differences(recs_.front().setting, setting);
  if (::isatty(2))
    log::status(strf("tune: stage %d, rung %d: %s (%lld steps; %s of %s spent)", stage, rung + 1,
                     what == "-" ? "the spec as written" : what.c_str(), static_cast<long long>(steps),
                     formatDuration(now()).c_str(), formatDuration(o_.budgetS).c_str()));
  TrialResult t = trial_(setting, steps, limit);
  t.stage = stage;
  t.rung = rung;
  t.steps = steps;
  const bool over = t.ok && o_.memoryBudgetBytes > 0 && t.peakBytes > o_.memoryBudgetBytes;
  if (over) {
    t.ok = false;
    t.failure = "over the memory budget: peak " + mib(t.peakBytes) + " > " + mib(o_.memoryBudgetBytes);
  }
  if (recs_[idx].trials.empty()) recs_[idx].stage = stage;  // a stage-1 candidate first tried in stage 2
  recs_[idx].trials.push_back(t);
  log::info(strf("tune: stage %d, rung %d, %lld steps: %s: ", stage, rung + 1, static_cast<long long>(steps),
                 what == "-" ? "as written" : what.c_str()) +
            (t.ok ? strf("%.0f %s/s", t.imagesPerS, o_.unit.c_str()) : t.failure));
  if (!t.ok) {
    recs_[idx].status = over ? "over the memory budget" : "failed: " + t.failure;
    const auto next = over ? smaller(recs_[idx].setting, static_cast<double>(o_.memoryBudgetBytes) /
                                                             static_cast<double>(t.peakBytes))
                           : std::nullopt;
    if (next && alive) {
      const int n = record(*next, stage);
      if (recs_[n].trials.empty() && std::find(alive->begin(), alive->end(), n) == alive->end()) alive->push_back(n);
    }
  }
  return true;
}

// Timed steps per trial of the first of `rungs` (the ones left; each doubles the steps of the one
// before) so that they end by `end`; not clamped.
double Search::stepsFor(const std::vector<int>& alive, const std::vector<Rung>& rungs, double end) const {
  double overhead = 0, step = 0;
  for (int i : alive) {
    overhead += costOf(i, 0);
    step += costOf(i, 1) - costOf(i, 0);
  }
  overhead /= static_cast<double>(alive.size());
  step /= static_cast<double>(alive.size());
  double trials = 0, weighted = 0;
  for (std::size_t r = 0; r < rungs.size(); ++r) {
    const double n = static_cast<double>(rungs[r].size) * rungs[r].rounds;
    trials += n;
    weighted += n * std::pow(2.0, static_cast<double>(r));
  }
  const double left = end - now() - trials * overhead;
  return step > 0 ? left / (weighted * step) : static_cast<double>(o_.maxSteps);
}

// One round of a rung over `alive` (reversed every other round); candidates added to `alive`
// during the round (smaller siblings of ones over the memory budget) run in it too.
void Search::round(std::vector<int>& alive, std::int64_t steps, int stage, int rung) {
  std::vector<int> order = alive;
  if (round_++ % 2) std::reverse(order.begin(), order.end());
  for (std::size_t k = 0; k < order.size(); ++k) {
    if (!measure(order[k], steps, stage, rung, &alive)) return;
    for (int i : alive)
      if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  }
}

bool Search::failed(int idx) const { return recs_[idx].failed(); }

// The best `keep` of `alive` by median (plus `keepIdx`); the others are marked dropped.
std::vector<int> Search::halve(std::vector<int> alive, std::size_t keep, int stage, int rung, int keepIdx) {
  std::stable_sort(alive.begin(), alive.end(), [&](int a, int b) { return recs_[a].median() > recs_[b].median(); });
  std::vector<int> kept;
  for (std::size_t k = 0; k < alive.size(); ++k) {
    const int i = alive[k];
    if (k < keep || i == keepIdx) {
      kept.push_back(i);
    } else {
      recs_[i].status = strf("dropped (stage %d, rung %d)", stage, rung + 1);
    }
  }
  return kept;
}

// Successive halving over `alive` until `end`; returns the best finalist (-1: none ran).
int Search::halving(std::vector<int> alive, int stage, double end, int keepIdx) {
  const bool keep = keepIdx >= 0;
  const std::size_t offered = alive.size();
  while (alive.size() > 2 && stepsFor(alive, schedule(alive.size(), keep), end) < o_.minSteps) alive.pop_back();
  if (alive.size() < offered)
    notes_.push_back(strf("stage %d: the budget holds %zu of its %zu candidates (the most promising first)", stage,
                          alive.size(), offered));
  for (int rung = 0; !alive.empty() && !outOfTime_; ++rung) {
    const std::vector<Rung> rungs = schedule(alive.size(), keep);
    const auto steps = std::clamp<std::int64_t>(std::llround(stepsFor(alive, rungs, end)), o_.minSteps, o_.maxSteps);
    for (int r = 0; r < rungs[0].rounds && !outOfTime_; ++r) round(alive, steps, stage, rung);
    alive.erase(std::remove_if(alive.begin(), alive.end(), [&](int i) { return failed(i) || recs_[i].trials.empty(); }),
                alive.end());
    if (rungs.size() == 1) break;
    alive = halve(alive, (alive.size() + 1) / 2, stage, rung, keepIdx);
  }
  if (outOfTime_) notes_.push_back(strf("stage %d: stopped by the time budget", stage));
  int bestIdx = -1;
  for (int i : alive) {
    recs_[i].status = strf("finalist (stage %d)", stage);
    if (bestIdx < 0 || recs_[i].median() > recs_[bestIdx].median()) bestIdx = i;
  }
  return bestIdx;
}

// The best median among candidates with at least `minTrials` trials, none failed.
int Search::best(int minTrials) const {
  int b = -1;
  for (std::size_t i = 0; i < recs_.size(); ++i)
    if (recs_[i].successes() >= minTrials && !failed(static_cast<int>(i)) &&
        (b < 0 || recs_[i].median() > recs_[b].median()))
      b = static_cast<int>(i);
  return b;
}

TuneOutcome Search::run(const std::vector<Setting>& stage1,
                        const std::function<std::vector<Setting>(const Setting&)>& refine) {
  std::vector<int> first;
  for (const auto& s : stage1) first.push_back(record(s, 1));
  calibrate(first.front());
  const int w1 = halving(first, 1, now() + 0.55 * (o_.budgetS - now()), first.front());
  if (w1 >= 0 && !outOfTime_) {
    std::vector<Setting> next = refine(recs_[w1].setting);
    if (const auto merged = mergeGains(first, w1))
      if (std::find(next.begin(), next.end(), *merged) == next.end()) next.insert(next.begin() + 1, *merged);
    std::vector<int> second;
    for (const auto& s : next) second.push_back(record(s, 2));
    if (second.size() > 1) halving(second, 2, o_.budgetS, -1);
  }
  polish();
  if (::isatty(2)) log::status("");
  return outcome(first.front());
}

// Stage 1's winner with every knob that helped alone: each stage-1 candidate that changed one knob
// of the spec as written (layout, precision or memory format) and beat it lends that knob; nullopt
// when that adds nothing (interactions a trimmed stage 1 did not try).
std::optional<Setting> Search::mergeGains(const std::vector<int>& stage1, int winner) const {
  const CandidateRecord& w = recs_[stage1.front()];
  Setting merged = recs_[winner].setting;
  for (int i : stage1) {
    const Setting& s = recs_[i].setting;
    if (failed(i) || recs_[i].median() <= w.median()) continue;
    const int knobs = (s.procs != w.setting.procs) + (s.precision != w.setting.precision) +
                      (s.channelsLast != w.setting.channelsLast);
    if (knobs != 1) continue;
    if (s.procs != w.setting.procs && merged.procs == w.setting.procs) {
      merged.procs = s.procs;
      merged.threads = s.threads;
      merged.micro = s.micro;
      merged.accumulate = s.accumulate;
    }
    if (s.precision != w.setting.precision && merged.precision == w.setting.precision) merged.precision = s.precision;
    if (s.channelsLast != w.setting.channelsLast) merged.channelsLast = s.channelsLast;
  }
  if (merged == recs_[winner].setting) return std::nullopt;
  return merged;
}

// The time the stages left: more alternated rounds of the two best so far (their medians firm up),
// until the next trial would not fit the budget.
void Search::polish() {
  std::vector<int> top;
  for (std::size_t i = 0; i < recs_.size(); ++i)
    if (recs_[i].successes() > 0 && !failed(static_cast<int>(i))) top.push_back(static_cast<int>(i));
  std::stable_sort(top.begin(), top.end(), [&](int a, int b) { return recs_[a].median() > recs_[b].median(); });
  if (top.size() > 2) top.resize(2);
  if (top.empty()) return;
  const std::int64_t steps = std::max(o_.minSteps, recs_[top.front()].trials.back().steps);
  int rounds = 0;
  while (!outOfTime_) {
    std::vector<int> alive = top;
    round(alive, steps, 3, 0);
    ++rounds;
  }
  if (rounds > 1) notes_.push_back(strf("%d more round(s) of the two best in the time left", rounds - 1));
}

// The first trial, of the spec as written, gives the cost model; a budget that cannot hold two
// candidates in two rounds is refused.
void Search::calibrate(int written) {
  measure(written, o_.minSteps, 1, 0, nullptr);
  const TrialResult& t = recs_[written].trials.back();
  if (t.failure.rfind("too slow", 0) == 0)  // stopped at the budget's end: the budget is too small
    throw TuneError(strf("--time-budget %s is too small: one trial of the spec as written (start-up, %lld warm-up "
                         "and %lld timed steps) did not end within it",
                         formatDuration(o_.budgetS).c_str(), static_cast<long long>(o_.warmupSteps),
                         static_cast<long long>(o_.minSteps)));
  if (t.stepS <= 0)
    throw std::runtime_error("tune: the spec as written did not run: " + t.failure);
  overheadS_ = t.overheadS;
  stepS_ = t.stepS;
  if (4 * t.wallS > o_.budgetS)
    throw TuneError(strf("--time-budget %s is too small: one trial of the spec as written takes %s here (start-up "
                         "%s + %lld steps of %.3f s); give at least %s",
                         formatDuration(o_.budgetS).c_str(), formatDuration(t.wallS).c_str(),
                         formatDuration(t.overheadS).c_str(), static_cast<long long>(o_.minSteps), t.stepS,
                         formatDuration(std::ceil(4 * t.wallS)).c_str()));
}

TuneOutcome Search::outcome(int written) {
  TuneOutcome out;
  out.unit = o_.unit;
  int w = best(2);
  if (w < 0) w = best(1);
  if (w < 0) {
    std::int64_t least = 0;
    for (const auto& r : recs_)
      for (const auto& t : r.trials)
        if (t.peakBytes > 0 && t.failure.rfind("over the memory budget", 0) == 0 && (least == 0 || t.peakBytes < least))
          least = t.peakBytes;
    if (least > 0)
      throw TuneError("no candidate fits the memory budget of " + mib(o_.memoryBudgetBytes) +
                      " per process (the smallest peak measured: " + mib(least) + ")");
    throw std::runtime_error("tune: no candidate completed a trial (see the trials above)");
  }
  // A change is made only when it measurably helps: within kMinGain of the spec as written, the
  // spec stays as it is.
  if (w != written && !failed(written) && recs_[written].successes() >= 2 &&
      recs_[w].median() < (1 + kMinGain) * recs_[written].median()) {
    notes_.push_back(strf("the best candidate (%s) was within %.0f %% of the spec as written, which is kept",
                          differences(recs_[written].setting, recs_[w].setting).c_str(), 100 * kMinGain));
    w = written;
  }
  recs_[w].status = "chosen";
  std::vector<int> order(recs_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto klass = [&](int i) { return recs_[i].trials.empty() ? 2 : failed(i) ? 1 : 0; };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    if (klass(a) != klass(b)) return klass(a) < klass(b);
    return klass(a) == 0 && recs_[a].median() > recs_[b].median();
  });
  for (int i : order) {
    if (i == w) out.winner = static_cast<int>(out.candidates.size());
    if (i == written) out.written = static_cast<int>(out.candidates.size());
    out.candidates.push_back(recs_[i]);
  }
  out.spentS = now();
  out.notes = notes_;
  return out;
}

}  // namespace

TuneOutcome runTune(const std::vector<Setting>& stage1,
                    const std::function<std::vector<Setting>(const Setting&)>& refine, const TrialFn& trial,
                    const TuneOptions& options, const ClockFn& clock) {
  if (stage1.empty()) throw TuneError("tune: no candidate to measure");
  if (options.budgetS <= 0) throw TuneError("--time-budget must be positive");
  Search search(trial, options, clock);
  return search.run(stage1, refine);
}

}  // namespace exprun
