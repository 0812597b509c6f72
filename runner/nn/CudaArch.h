// Purpose: whether exprun's own CUDA kernels (the fused batch norm, the JPEG crop's resampling and
// augmentation) have code a given device can run: the build compiles them for a list of
// architectures (EXPRUN_CUDA_ARCHITECTURES), and a device outside it takes the plain ATen paths.
#pragma once

namespace exprun {

// True when device `index` can run the kernels (its SASS is built, or PTX it can compile); the
// answer is cached per device. Plain CUDA, no torch headers.
bool ownKernelsRunOn(int index);

}  // namespace exprun
