// Purpose: what `exprun tune` writes (see Tune.h): the ranked table, the trials as JSON, and the
// winner as a spec that `base:`s the original.
#include <algorithm>
#include <filesystem>
#include <map>

#include "runner/results/ResultFile.h"
#include "runner/tune/Tune.h"
#include "runner/util/Format.h"

namespace fs = std::filesystem;

namespace exprun {
namespace {

std::int64_t maxOf(const CandidateRecord& c, std::int64_t TrialResult::*field) {
  std::int64_t m = 0;
  for (const auto& t : c.trials) m = std::max(m, t.*field);
  return m;
}

// MFU at the candidate's median speed (MFU is proportional to images/s); -1: unknown.
double medianMfu(const CandidateRecord& c) {
  for (const auto& t : c.trials)
    if (t.ok && t.mfu >= 0 && t.imagesPerS > 0) return t.mfu * c.median() / t.imagesPerS;
  return -1;
}

std::string mib(std::int64_t bytes) { return bytes > 0 ? formatMiB(bytes) : "-"; }

std::string thousands(double v) {
  std::string s = strf("%.0f", v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

double ratioToWritten(const TuneOutcome& o, const CandidateRecord& c) {
  const double w = o.written >= 0 ? o.candidates[o.written].median() : 0;
  return w > 0 && c.median() > 0 ? c.median() / w : 0;
}

// "a.b=v" overrides → nested YAML (block style), keys in order of first appearance, later values win.
struct YamlTree {
  std::vector<std::pair<std::string, std::string>> leaves;  // key, value
  std::vector<std::pair<std::string, YamlTree>> children;
  void set(const std::string& path, const std::string& value) {
    const auto dot = path.find('.');
    if (dot == std::string::npos) {
      for (auto& [k, v] : leaves)
        if (k == path) { v = value; return; }
      leaves.emplace_back(path, value);
      return;
    }
    const std::string head = path.substr(0, dot);
    for (auto& [k, child] : children)
      if (k == head) { child.set(path.substr(dot + 1), value); return; }
    children.emplace_back(head, YamlTree{});
    children.back().second.set(path.substr(dot + 1), value);
  }
  std::string text(int indent) const {
    std::string out, pad(static_cast<std::size_t>(indent), ' ');
    for (const auto& [k, v] : leaves) out += pad + k + ": " + v + "\n";
    for (const auto& [k, child] : children) out += pad + k + ":\n" + child.text(indent + 2);
    return out;
  }
};

}  // namespace

std::string runCommand(const Setting& s, const std::string& specFile) {
  return s.procs > 1 ? "exprun launch --nproc-per-node " + std::to_string(s.procs) + " " + specFile
                     : "exprun run " + specFile;
}

std::string tuneTable(const TuneOutcome& o, std::int64_t memoryBudgetBytes) {
  const Setting& written = o.candidates[o.written].setting;
  std::string t = strf("%-4s %10s %10s %11s %10s %8s %6s  %-26s %s\n", "rank", (o.unit + "/s").c_str(), "vs written", "tensor MiB",
                       "peak MiB", "MFU", "trials", "status", "differs from the spec as written");
  int rank = 0;
  for (std::size_t i = 0; i < o.candidates.size(); ++i) {
    const CandidateRecord& c = o.candidates[i];
    if (c.trials.empty()) continue;
    const bool ranked = c.successes() > 0 && !c.failed();
    const double ratio = ratioToWritten(o, c), mfu = medianMfu(c);
    std::string status = c.status;
    if (static_cast<int>(i) == o.written) status += status == "chosen" ? " (as written)" : ", as written";
    t += strf("%-4s %10s %10s %11s %10s %8s %6zu  %-26s %s\n", ranked ? std::to_string(++rank).c_str() : "-",
              c.median() > 0 ? thousands(c.median()).c_str() : "-", ratio > 0 ? strf("%.2fx", ratio).c_str() : "-",
              mib(maxOf(c, &TrialResult::tensorBytes)).c_str(), mib(maxOf(c, &TrialResult::peakBytes)).c_str(),
              mfu >= 0 ? formatMfu(mfu).c_str() : "-", c.trials.size(), status.c_str(),
              differences(written, c.setting).c_str());
  }
  const auto untried = std::count_if(o.candidates.begin(), o.candidates.end(),
                                     [](const CandidateRecord& c) { return c.trials.empty(); });
  if (untried) t += strf("(%lld more candidate(s) not tried within the time budget)\n", static_cast<long long>(untried));
  if (memoryBudgetBytes > 0) t += "memory budget per process: " + formatGiB(memoryBudgetBytes) + " GiB (peak MiB)\n";
  return t;
}

nlohmann::json tuneJson(const TuneOutcome& o, const std::string& specPath, const TuneMachine& m, const TuneOptions& opt) {
  nlohmann::json cands = nlohmann::json::array();
  const Setting& written = o.candidates[o.written].setting;
  for (const auto& c : o.candidates) {
    nlohmann::json trials = nlohmann::json::array();
    for (const auto& t : c.trials)
      trials.push_back({{"stage", t.stage}, {"rung", t.rung + 1}, {"timed_steps", t.steps}, {"ok", t.ok},
                        {o.unit + "_per_s", t.imagesPerS}, {"step_s", t.stepS}, {"overhead_s", t.overheadS},
                        {"wall_s", t.wallS}, {"peak_memory_bytes", t.peakBytes}, {"peak_allocated_bytes", t.tensorBytes},
                        {"mfu", t.mfu >= 0 && t.mfu <= 1 ? nlohmann::json(t.mfu) : nlohmann::json()},
                        {"failure", t.failure}});
    const double mfu = medianMfu(c), ratio = ratioToWritten(o, c);
    cands.push_back({{"setting", settingJson(c.setting)}, {"differs", differences(written, c.setting)},
                     {"overrides", settingSets(c.setting, written)}, {"status", c.status},
                     {"median_" + o.unit + "_per_s", c.median()}, {"ratio_to_written", ratio > 0 ? nlohmann::json(ratio) : nlohmann::json()},
                     {"mfu", mfu >= 0 && mfu <= 1 ? nlohmann::json(mfu) : nlohmann::json()}, {"trials", trials}});
  }
  return {{"spec", specPath}, {"machine", m.description}, {"budget_s", opt.budgetS}, {"spent_s", o.spentS},
          {"global_batch", written.globalBatch()}, {"warmup_steps", opt.warmupSteps},
          {"memory_budget_bytes", opt.memoryBudgetBytes}, {"winner", o.winner}, {"written", o.written},
          {"unit", o.unit}, {"notes", o.notes}, {"candidates", cands}};
}

std::string tunedSpecYaml(const TuneOutcome& o, const std::string& specPath, const std::string& tunedPath,
                          const std::string& name, const std::vector<std::string>& userSets, const TuneMachine& m) {
  const CandidateRecord& win = o.candidates[o.winner];
  const Setting& written = o.candidates[o.written].setting;
  std::size_t trials = 0;
  for (const auto& c : o.candidates) trials += c.trials.size();
  std::string y = "# Tuned by `exprun tune " + specPath + "` on " + m.description + ":\n" +
                  strf("# %zu trials in %s, global batch %lld kept. Run it with:\n", trials,
                       formatDuration(o.spentS).c_str(), static_cast<long long>(written.globalBatch())) +
                  "#   " + runCommand(win.setting, tunedPath) + "\n" +
                  "# Measured here (" + o.unit + "/s, median of each candidate's trials; ratio to the spec as written):\n";
  for (std::size_t i = 0; i < o.candidates.size() && i < 12; ++i) {
    const CandidateRecord& c = o.candidates[i];
    if (c.successes() == 0) continue;
    const double r = ratioToWritten(o, c);
    y += strf("#   %-8s %9s %6s  %s\n", static_cast<int>(i) == o.winner ? "chosen" : static_cast<int>(i) == o.written ? "written" : "",
              thousands(c.median()).c_str(), r > 0 ? strf("%.2fx", r).c_str() : "-", describe(c.setting).c_str());
  }
  // The base relative to the tuned spec's folder when both lie under the working folder (a
  // repository moves with its specs), else absolute.
  const fs::path base = fs::absolute(specPath).lexically_normal();
  const fs::path folder = fs::absolute(tunedPath).parent_path().lexically_normal();
  const auto inside = [](const fs::path& p) {
    const fs::path r = p.lexically_relative(fs::current_path());
    return !r.empty() && *r.begin() != "..";
  };
  const fs::path rel = inside(base) && inside(folder) ? base.lexically_relative(folder) : fs::path();
  YamlTree tree;
  for (const auto& s : userSets) {
    const auto eq = s.find('=');
    if (eq != std::string::npos && s.substr(0, eq) != "name") tree.set(s.substr(0, eq), s.substr(eq + 1));
  }
  for (const auto& s : settingSets(win.setting, written)) {
    const auto eq = s.find('=');
    tree.set(s.substr(0, eq), s.substr(eq + 1));
  }
  y += "base: " + (rel.empty() ? base : rel).string() + "\nname: " + name + "\n" + tree.text(0);
  return y;
}

}  // namespace exprun
