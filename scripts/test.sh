#!/usr/bin/env bash
# Purpose: the README's second quick-start command (and what CI runs): set up, build, and run the
# whole test suite (doctest through CTest, CPU only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$EXPRUN_BUILD_DIR"
# N CPU slots for N jobs, and one more test at a time that takes none (the Slurm test, which waits
# on its cluster's time limits): tests/CMakeLists.txt gives every other test one slot.
JOBS="${EXPRUN_JOBS:-2}"
printf '{"version": {"major": 1, "minor": 0}, "local": [{"cpus": [{"id": "0", "slots": %d}]}]}\n' "$JOBS" >cpu-slots.json
ctest --output-on-failure -j "$((JOBS + 1))" --resource-spec-file cpu-slots.json --timeout 600 "$@"
