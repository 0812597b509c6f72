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
// Throws std::invalid_argument naming train.precision when autocast refuses it on `device`.
void checkPrecisionSupported(Precision precision, const torch::Device& device);

}  // namespace exprun
