// Purpose: grid sweeps (see Sweep.h): grid parsing and expansion, validation of every combination
// with the spec loader, the runs as child processes, and the sweep's report.
#include "runner/report/Sweep.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>

#include "runner/report/Report.h"
#include "runner/results/ResultFile.h"
#include "runner/spec/RunPaths.h"
#include "runner/util/AtomicFile.h"
#include "runner/util/ExitCodes.h"
#include "runner/util/Format.h"
#include "runner/util/Log.h"
#include "runner/util/Spawn.h"

namespace fs = std::filesystem;

namespace exprun {
namespace {

// Splits at commas outside brackets and braces.
std::vector<std::string> splitValues(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char c : text) {
    if (c == '[' || c == '{') ++depth;
    if ((c == ']' || c == '}') && depth > 0) --depth;
    if (c == ',' && depth == 0) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  for (auto& v : out) {
    auto b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
    v = b == std::string::npos ? "" : v.substr(b, e - b + 1);
  }
  return out;
}

// The stop signal of a running sweep, forwarded to the current run's process group.
volatile sig_atomic_t gStopSignal = 0;
volatile pid_t gChild = 0;

extern "C" void onSweepSignal(int sig) {
  gStopSignal = sig;
  if (gChild > 0) ::kill(-gChild, sig);
}

// Runs `exe args...` in its own process group (so a signal reaches it once, from us); returns its
// exit code (128 + signal when killed).
int runChild(const std::string& exe, const std::vector<std::string>& args) {
  SpawnOptions o;
  o.who = "sweep";
  const pid_t pid = spawn(exe, args, o).pid;
  gChild = pid;
  if (gStopSignal) ::kill(-pid, gStopSignal);
  const int code = waitExitCode(pid);
  gChild = 0;
  return code;
}

}  // namespace

GridAxis parseGridArg(const std::string& arg) {
  auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) throw SweepError("--grid '" + arg + "': expected key.path=value1,value2,...");
  GridAxis g;
  g.key = arg.substr(0, eq);
  static const std::regex keyRe("^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$");
  if (!std::regex_match(g.key, keyRe))
    throw SweepError("--grid '" + arg + "': '" + g.key + "' is not a key path like train.batch_size");
  if (g.key == "name" || g.key == "base" || g.key == "output.dir")
    throw SweepError("--grid '" + arg + "': '" + g.key + "' cannot be swept (the sweep sets " +
                     (g.key == "output.dir" ? "the output directory: use --out" : "it itself") + ")");
  g.values = splitValues(arg.substr(eq + 1));
  std::set<std::string> seen;
  for (const auto& v : g.values) {
    if (v.empty()) throw SweepError("--grid '" + arg + "': empty value");
    if (!seen.insert(v).second) throw SweepError("--grid '" + arg + "': value '" + v + "' is listed twice");
  }
  return g;
}

std::vector<std::string> gridKeyLabels(const std::vector<GridAxis>& grids) {
  std::vector<std::string> labels;
  for (const auto& g : grids) labels.push_back(g.key.substr(g.key.rfind('.') + 1));
  std::set<std::string> unique(labels.begin(), labels.end());
  if (unique.size() != labels.size())
    for (std::size_t i = 0; i < grids.size(); ++i) labels[i] = grids[i].key;
  return labels;
}

std::string sanitizeNameValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    if (ok)
      out += c;
    else if (out.empty() || out.back() != '_')
      out += '_';
  }
  while (!out.empty() && out.front() == '_') out.erase(out.begin());
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out.empty() ? "none" : out;
}

std::vector<SweepRun> expandGrid(const std::string& baseName, const std::vector<GridAxis>& grids) {
  if (grids.empty()) throw SweepError("sweep: no --grid given");
  std::map<std::string, std::size_t> keys;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    if (grids[i].values.empty()) throw SweepError("--grid " + grids[i].key + ": no values");
    auto [it, fresh] = keys.emplace(grids[i].key, i);
    if (!fresh)
      throw SweepError("--grid " + grids[i].key + ": the key is in two grids (#" + std::to_string(it->second + 1) +
                       " and #" + std::to_string(i + 1) + "); give all its values in one --grid");
  }
  const auto labels = gridKeyLabels(grids);
  std::vector<std::size_t> idx(grids.size(), 0);
  std::vector<SweepRun> runs;
  std::map<std::string, std::string> byName;  // run name → its settings, to catch collisions
  while (true) {
    SweepRun run;
    run.name = baseName;
    for (std::size_t g = 0; g < grids.size(); ++g) {
      const std::string& v = grids[g].values[idx[g]];
      run.sets.push_back(grids[g].key + "=" + v);
      run.name += "__" + labels[g] + "-" + sanitizeNameValue(v);
    }
    auto [it, fresh] = byName.emplace(run.name, joinStrings(run.sets, " "));
    if (!fresh)
      throw SweepError("--grid: the combinations '" + it->second + "' and '" + joinStrings(run.sets, " ") +
                       "' both give the run name '" + run.name + "'; use values that differ in letters or digits");
    runs.push_back(std::move(run));
    // Odometer: the last grid varies fastest.
    std::size_t g = grids.size();
    while (g > 0) {
      --g;
      if (++idx[g] < grids[g].values.size()) break;
      idx[g] = 0;
      if (g == 0) return runs;
    }
  }
}

Sweep prepareSweep(const std::string& specPath, const std::vector<std::string>& gridArgs,
                    const std::vector<std::string>& sets, const std::string& outDir) {
  Sweep sweep;
  sweep.specPath = specPath;
  sweep.sets = sets;
  const Spec base = loadSpec(specPath, sets);
  sweep.baseName = base.name;
  sweep.outDir = outDir.empty() ? base.output.dir : outDir;
  std::vector<GridAxis> grids;
  for (const auto& a : gridArgs) grids.push_back(parseGridArg(a));
  sweep.runs = expandGrid(base.name, grids);
  // Each grid value alone first, so an error names the grid entry and its value ...
  for (const auto& g : grids)
    for (const auto& v : g.values) {
      std::vector<std::string> s = sets;
      s.push_back(g.key + "=" + v);
      try {
        loadSpec(specPath, s);
      } catch (const SpecError& e) {
        throw SweepError("--grid " + g.key + "=" + joinStrings(g.values, ",") + ": value '" + v + "': " + e.what());
      }
    }
  // ... then every combination (values valid alone can still clash, e.g. a model type and its options).
  for (const auto& run : sweep.runs) {
    std::vector<std::string> s = sets;
    s.insert(s.end(), run.sets.begin(), run.sets.end());
    s.push_back("name=" + run.name);
    s.push_back("output.dir=" + sweep.outDir);
    try {
      sweep.specs.push_back(loadSpec(specPath, s));
    } catch (const SpecError& e) {
      throw SweepError("--grid combination " + joinStrings(run.sets, " ") + " (run " + run.name + "): " + e.what());
    }
  }
  return sweep;
}

std::vector<std::string> writeSweepSpecs(const Sweep& sweep, const std::string& dir) {
  std::vector<std::string> paths;
  std::string list;
  for (std::size_t i = 0; i < sweep.runs.size(); ++i) {
    const std::string path = (fs::path(dir) / (sweep.runs[i].name + ".yaml")).string();
    writeFileAtomically(path, "# exprun sweep of " + sweep.specPath + ": " + joinStrings(sweep.runs[i].sets, " ") + "\n" +
                                  sweep.specs[i].toYaml());
    paths.push_back(path);
    list += fs::absolute(path).lexically_normal().string() + "\n";
  }
  writeFileAtomically((fs::path(dir) / "runs.txt").string(), list);
  return paths;
}

namespace {

// The `exprun run` (or `exprun launch`) arguments of run `i`.
std::vector<std::string> runArguments(const Sweep& sweep, std::size_t i, const SweepRunOptions& o) {
  std::vector<std::string> a;
  if (o.launch > 0)
    a = {"launch", "--nproc-per-node", std::to_string(o.launch), sweep.specPath};
  else
    a = {"run", sweep.specPath};
  for (const auto& s : sweep.sets) a.insert(a.end(), {"--set", s});
  for (const auto& s : sweep.runs[i].sets) a.insert(a.end(), {"--set", s});
  a.insert(a.end(), {"--set", "name=" + sweep.runs[i].name, "--out", sweep.outDir});
  if (o.overwrite) a.push_back("--overwrite");
  return a;
}

}  // namespace

bool writeSweepReport(const std::string& outDir, const std::string& baseName, const std::vector<std::string>& resultPaths,
                      const std::vector<std::string>& failed) {
  std::vector<RunSummary> summaries;
  for (const auto& p : resultPaths) {
    if (!fs::exists(p)) continue;
    try {
      summaries.push_back(loadRunSummary(p));
    } catch (const ReportError& e) {
      log::error(e.what());
    }
  }
  if (summaries.empty()) {
    log::error("sweep: no run left a result file; no report written");
    return true;
  }
  try {
    Report rep = buildReport(summaries);
    const fs::path stem = fs::path(outDir) / (baseName + "-sweep");
    std::string md = renderMarkdown(rep);
    if (!failed.empty()) md += "\nFailed runs: " + joinStrings(failed, ", ") + "\n";
    writeFileAtomically(stem.string() + ".md", md);
    writeFileAtomically(stem.string() + ".html", renderHtml(rep));
    std::cout << md << std::flush;
    log::info("sweep: report written to " + stem.string() + ".md and .html");
    return true;
  } catch (const std::exception& e) {
    log::error(std::string("sweep: cannot write the report: ") + e.what());
    return false;
  }
}

std::vector<std::string> Sweep::resultPaths() const {
  std::vector<std::string> paths;
  for (const auto& run : runs) paths.push_back(RunPaths(outDir, run.name).result());
  return paths;
}

SweepOutcome runSweep(const Sweep& sweep, const SweepRunOptions& o) {
  gStopSignal = 0;
  struct sigaction sa {
  }, oldInt{}, oldTerm{};
  sa.sa_handler = onSweepSignal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &oldInt);
  ::sigaction(SIGTERM, &sa, &oldTerm);
  SweepOutcome out;
  for (std::size_t i = 0; i < sweep.runs.size() && !gStopSignal; ++i) {
    const SweepRun& run = sweep.runs[i];
    log::info(strf("sweep: run %zu/%zu: %s (%s)", i + 1, sweep.runs.size(), run.name.c_str(),
                   joinStrings(run.sets, " ").c_str()));
    int code = kExitFailure;
    try {
      code = runChild(o.exe, runArguments(sweep, i, o));
    } catch (const std::exception& e) {
      log::error(e.what());
    }
    ++out.done;
    if (code != kExitOk) {
      out.failed.push_back(run.name + " (exit " + std::to_string(code) + ")");
      log::error("sweep: run " + run.name + " failed with exit code " + std::to_string(code));
    }
  }
  ::sigaction(SIGINT, &oldInt, nullptr);
  ::sigaction(SIGTERM, &oldTerm, nullptr);
  if (!writeSweepReport(sweep.outDir, sweep.baseName, sweep.resultPaths(), out.failed)) out.failed.push_back("(report)");
  out.interrupted = gStopSignal != 0;
  return out;
}

}  // namespace exprun
