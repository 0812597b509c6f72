#!/usr/bin/env bash
# Purpose: the README's second quick-start command (and what CI runs): set up, build, and run the
# whole test suite (doctest through CTest, CPU only).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$EXPRUN_BUILD_DIR"
ctest --output-on-failure -j "${EXPRUN_JOBS:-2}" --timeout 600 "$@"
