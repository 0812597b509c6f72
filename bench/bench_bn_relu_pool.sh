#!/usr/bin/env bash
# Purpose: the fused BN -> ReLU -> max-pool kernel against libtorch's modules (bench/bn_relu_pool_bench.cpp):
# builds the bench target (not part of the default build) and prints one JSON line per layout and
# shape, with the CPU it ran on.
# Usage: bench/bench_bn_relu_pool.sh [REPEATS=5]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cmake --build "$EXPRUN_BUILD_DIR" --target exprun_bench_kernels >&2
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores)"
"$EXPRUN_BUILD_DIR/exprun_bench_kernels" "${1:-5}"
