// Purpose: what a run asks of the Slurm job it runs in — the job's state as slurmctld sees it (a
// SIGTERM from `scancel` comes with the job CANCELLED; one from `scancel --signal` or a
// preemption does not), and requeueing it (`scontrol requeue`), after the run saved its checkpoint
// on SIGUSR1 (`sbatch --signal=USR1@N`, which `exprun sweep --slurm` adds) — and how such a stop ends:
// "requeued" or "cancelled". Torch-free; the Slurm commands are found on PATH.
#pragma once

#include <string>

namespace exprun {

// SLURM_JOB_ID (an array task's own job id), "" outside Slurm.
std::string slurmJobId();
// The job's state ("RUNNING", "CANCELLED", "PREEMPTED", ...; "" when squeue cannot say).
std::string slurmJobState(const std::string& jobId);
// `scontrol requeue JOB`: true when Slurm took it, else false with Slurm's reason in `why`.
bool requeueSlurmJob(const std::string& jobId, std::string& why);
// How a run of Slurm job `jobId` stopped by `signal` ends: SIGUSR1 "requeued"; SIGTERM
// "cancelled" when Slurm is ending the job (COMPLETING: `scancel`, or a time limit reached without
// a signal first; or the job gone), "requeued" while it runs on (a preemption, `scancel
// --signal=TERM`), else "interrupted"; SIGINT "interrupted".
std::string slurmStopStatus(const std::string& jobId, int signal);

}  // namespace exprun
