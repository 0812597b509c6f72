// Purpose: `exprun sweep ... --slurm`: a sweep as one Slurm job array, one task per grid point.
// The job script (<out>/<base>-sweep.sbatch) runs task i's resolved spec (<out>/<base>-sweep.slurm/
// <run>.yaml, line i+1 of runs.txt there) as `srun exprun run SPEC --out <out>` with the tasks
// the options ask for, asks Slurm for SIGUSR1 N seconds before the time limit (--signal=USR1@N:
// the run saves at the next step on all ranks, requeues itself and resumes when it starts again)
// and marks the job requeueable. `sbatch --parsable` submits it; the array's job id and runs are
// recorded in <out>/<base>-sweep.slurm.json, which `exprun sweep --status DIR`, `--wait` and
// `exprun report DIR` read. Torch-free; sbatch, squeue and scontrol are found on PATH.
#pragma once

#include <string>
#include <vector>

#include "runner/report/Sweep.h"

namespace exprun {

struct SlurmArrayOptions {
  std::string exe;              // the exprun the tasks run (absolute path)
  std::string partition, time;  // sbatch --partition, --time ("": the cluster's defaults)
  int nodes = 1;
  int tasksPerNode = 0;  // 0: --gpus-per-node's count, else 1
  int gpusPerNode = 0;
  int signalS = 90;      // --signal=USR1@N (seconds before the time limit)
  std::vector<std::string> sbatchArgs;  // more #SBATCH lines, as given ("--mem=8G")
  bool overwrite = false;               // the runs replace existing result files
};

// The job script's text; `specDir` holds the runs' specs and runs.txt.
std::string slurmArrayScript(const Sweep& sweep, const SlurmArrayOptions& o, const std::string& specDir);
// Writes the runs' specs and the job script; returns the script's path.
std::string writeSlurmArray(const Sweep& sweep, const SlurmArrayOptions& o);
// Submits the script with sbatch --parsable and records the array (<out>/<base>-sweep.slurm.json);
// returns its job id. Throws SweepError with sbatch's message when Slurm refuses it.
std::string submitSlurmArray(const Sweep& sweep, const std::string& script);

// One run of a recorded array, as Slurm and its result file say.
struct SlurmTaskState {
  std::string name, resultPath;
  std::string slurm;   // squeue's state ("PENDING", "RUNNING", ...), "" when Slurm no longer lists it
  std::string status;  // the result file's status, "" when there is none
  std::int64_t epochs = 0;
  int attempts = 0;
};
struct SlurmArrayState {
  std::string jobId, baseName, outDir;
  std::vector<SlurmTaskState> tasks;
  bool finished() const;  // no task pending or running
};
// The array recorded in `dir` (a folder holding one <base>-sweep.slurm.json, or that file itself).
// Throws SweepError naming the folder when there is none or it is damaged.
SlurmArrayState slurmArrayState(const std::string& dir);
std::string formatSlurmArrayState(const SlurmArrayState& s);
// Polls until the array has finished (every `pollS` seconds), then writes the sweep's report;
// returns the runs that did not complete, "name (status)".
std::vector<std::string> waitForSlurmArray(const std::string& dir, double pollS);
// The runs whose result file does not say "completed": "name (status)" or "name (no result file)".
std::vector<std::string> notCompletedRuns(const SlurmArrayState& s);
// Writes <out>/<base>-sweep.md and .html from the array's result files; false when none exists.
bool writeSlurmArrayReport(const SlurmArrayState& s, const std::vector<std::string>& notCompleted);

}  // namespace exprun
