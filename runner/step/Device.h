// Purpose: where a rank trains — the process-group backend (`distributed.backend: auto`: NCCL on
// CUDA, Gloo on CPU), the device (one GPU per local rank, shared round-robin when ranks outnumber
// GPUs), the intra-op threads (the host's cores shared by its ranks unless train.threads says),
// and whether the device's autocast can run the spec's precision.
#pragma once

#include <torch/torch.h>

#include <string>

#include "runner/dist/DistEnv.h"
#include "runner/spec/Spec.h"

namespace exprun {

std::string chooseBackend(const Spec& spec);
// Throws std::invalid_argument when CUDA is asked for and absent.
torch::Device chooseDevice(const Spec& spec, const DistEnv& env);
int chooseThreads(const Execution& execution, const DistEnv& env);
// The cores this process may use: its affinity mask's when that is narrower than the host (a
// launcher pinned it), else the host's shared by the node's `localWorldSize` processes (at least 1).
int processCores(int localWorldSize);
// On CUDA, a warning when the loader's `workers` leave no core of this process's `cores` for the
// training thread, which launches the step's kernels ("" otherwise): workers that wait for a core
// slow the pipeline. On the CPU the step's own threads share the cores by design.
std::string workersWarning(int workers, int cores, const torch::Device& device);
// Throws std::invalid_argument naming train.precision when autocast refuses it on `device`.
void checkPrecisionSupported(Precision precision, const torch::Device& device);

}  // namespace exprun
