#!/usr/bin/env bash
# Purpose: the README's first quick-start command. Sets up and builds (scripts/setup.sh), then
# trains the shipped Fashion-MNIST experiment and prints its per-epoch table.
# Usage: scripts/main.sh [SPEC] [exprun run options...]   (default: experiments/fashion-mnist/small-cnn.yaml)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/setup.sh"
cd "$ROOT"
SPEC="${1:-experiments/fashion-mnist/small-cnn.yaml}"
shift || true
exec "$EXPRUN_BIN" run "$SPEC" --overwrite "$@"
