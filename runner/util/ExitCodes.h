// Purpose: the exit codes of exprun's processes, which its launcher and sweeps read back from the
// processes they start: 0 success, 1 an unexpected failure, 2 bad input (nothing trained or
// written), 3 a collective of the formed group timed out or lost a peer (resumable from the newest
// checkpoint), 130 interrupted (the completed epochs' results written). Torch-free.
#pragma once

namespace exprun {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitCollective = 3;
inline constexpr int kExitInterrupted = 130;

}  // namespace exprun
