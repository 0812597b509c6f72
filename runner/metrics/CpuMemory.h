// Purpose: allocated-bytes accounting on the CPU, like CUDA's caching-allocator statistics: a
// tracking allocator in front of c10's CPU allocator counts the bytes of live CPU tensors (current
// and peak, the peak resettable per epoch or phase). It sees what goes through c10's CPU
// allocator (every CPU tensor's storage); oneDNN's private scratch buffers and the process's
// libraries are not tensors and stay out (the resident set, VmHWM, still shows them).
#pragma once

#include <cstdint>

namespace exprun {

// Puts the tracking allocator in front of the current CPU allocator (once per process; later
// calls do nothing; EXPRUN_CPU_ALLOC_TRACKING=0 leaves it out). Tensors allocated before are not
// counted, neither when they are freed.
void installCpuAllocationTracking();
bool cpuAllocationTracked();
// Bytes of live CPU tensor storage allocated since the installation, and the peak since the last
// reset (both 0 without the installation).
std::int64_t cpuAllocatedBytes();
std::int64_t cpuPeakAllocatedBytes();
void resetCpuPeakAllocated();  // the peak becomes the current figure

}  // namespace exprun
