// Purpose: the precompiled header of every translation unit that uses LibTorch.
#pragma once
#include <torch/torch.h>
