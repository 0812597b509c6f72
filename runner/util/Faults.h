// Purpose: fault injection for the crash and disk-full tests, torch-free. EXPRUN_FAULT=
// "POINT@N[:rankR][:ERRNO][:resumed]" kills the process at the N-th time (1-based) POINT is reached,
// or with ERRNO makes the N-th system call there fail as a full or failing disk would.
// Rule: a resumed or restarted run disarms it (disarmFaults), so the retry gets through — unless
// `:resumed` is given (a test that kills a resumed run).
#pragma once

#include <cstdint>

namespace exprun {

// Without ERRNO: kills this process with SIGKILL the N-th time `point` is reached (on rank R only,
// if given). Points: "step" (after an optimizer step and its checkpoint, if one is due; N = step
// number), "save-begin", "save-partial" (half of state.bin written), "save-staged" (all files
// staged, before the rename), "save-renamed" (renamed, before "latest" is updated).
void faultPoint(const char* point, std::int64_t n, int rank);
// With ERRNO (ENOSPC, EIO or EDQUOT): the errno the next call at `point` must fail with (counted
// occurrences), or 0; on every rank that reaches the point (`:rankR` applies to kill faults only).
// Points: "save-write" (each write() of a checkpoint file), "save-fsync" (each fsync() of one),
// "save-rename" (the rename of the staged checkpoint), "result-write" (each write() of the result
// file), "file-write" (each write() of the other atomically written files, e.g. "latest").
int faultErrno(const char* point);
void disarmFaults();

}  // namespace exprun
