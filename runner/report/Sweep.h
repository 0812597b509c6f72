// Purpose: `exprun sweep SPEC --grid key=v1,v2 ...` — the cartesian product of the grids (first
// grid varies slowest), each combination applied as `--set key=value` overrides on top of the spec
// and named <base>__<key>-<value>__...; every combination is validated before anything runs. The
// runs are `exprun run` (or `exprun launch`) child processes of this executable; afterwards the
// report of all result files is written as <dir>/<base>-sweep.md and .html. `--print DIR` writes
// each combination's resolved spec instead (DIR/<run>.yaml, DIR/runs.txt). Torch-free.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "runner/spec/Spec.h"

namespace exprun {

// A malformed or inconsistent --grid; the message names the grid entry.
class SweepError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct GridAxis {
  std::string key;                  // a spec key path, e.g. train.batch_size
  std::vector<std::string> values;  // YAML values, as given
};

// "key=v1,v2,...": values split at commas outside [] and {} (so "k=[1,2],[3]" has two values).
// Throws SweepError for a malformed entry, an empty or repeated value, or a key sweep sets itself.
GridAxis parseGridArg(const std::string& arg);

struct SweepRun {
  std::string name;               // run name: the result file is <dir>/<name>.json
  std::vector<std::string> sets;  // the combination, "key=value", in grid order
};

// Label of a key in run names: its last component ("lr" for optimizer.lr) when the last
// components of all the keys are distinct, else the whole key path.
std::vector<std::string> gridKeyLabels(const std::vector<GridAxis>& grids);
// Value as it appears in a run name: every run of characters outside [A-Za-z0-9._-] becomes one
// "_", leading and trailing "_" are dropped ("[2, 4]" → "2_4"); an empty result is "none".
std::string sanitizeNameValue(const std::string& value);

// All combinations, first grid slowest. Throws SweepError for no grids, a key in two grids, or two
// combinations with the same run name.
std::vector<SweepRun> expandGrid(const std::string& baseName, const std::vector<GridAxis>& grids);

struct Sweep {
  std::string specPath;
  std::string baseName;
  std::string outDir;             // --out, else the spec's output.dir
  std::vector<std::string> sets;  // the user's --set, applied under every combination
  std::vector<SweepRun> runs;
  std::vector<Spec> specs;  // one resolved spec per run (name = the run name)
  std::vector<std::string> resultPaths() const;  // <out>/<run>.json, in order
};

// Loads SPEC (with `sets`), checks every grid value alone and then every combination with the spec
// loader. Throws SpecError (the spec itself) or SweepError (naming the grid entry or combination).
Sweep prepareSweep(const std::string& specPath, const std::vector<std::string>& gridArgs,
                    const std::vector<std::string>& sets, const std::string& outDir);

// Writes DIR/<run>.yaml (the resolved spec) for every run and DIR/runs.txt (their absolute paths,
// one per line, in order). Returns the paths written.
std::vector<std::string> writeSweepSpecs(const Sweep& sweep, const std::string& dir);

struct SweepRunOptions {
  std::string exe;      // the exprun executable that runs the combinations
  int launch = 0;       // > 0: each run through `exprun launch --nproc-per-node N`
  bool overwrite = false;
};

struct SweepOutcome {
  std::size_t done = 0;             // runs started
  std::vector<std::string> failed;  // "name (exit N)", and "(report)" when the report could not be written
  bool interrupted = false;         // stopped by SIGINT/SIGTERM (forwarded to the run in progress)
};

// Runs every combination as a child process, one after the other (a failed run does not stop the
// others), then writes the report of all result files (<out>/<base>-sweep.md and .html).
SweepOutcome runSweep(const Sweep& sweep, const SweepRunOptions& options);

// The report of every run that left a result file (completed, interrupted or failed mid-way), as
// <outDir>/<baseName>-sweep.md and .html (and printed), "failed" listed under it; false when it
// cannot be written (true, with an error logged, when no run left a result file).
bool writeSweepReport(const std::string& outDir, const std::string& baseName, const std::vector<std::string>& resultPaths,
                      const std::vector<std::string>& failed);

}  // namespace exprun
