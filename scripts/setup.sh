#!/usr/bin/env bash
# Purpose: idempotent set-up and build of exprun on a Debian 12 machine.
#   1. Debian packages (apt-get, only when something is missing),
#   2. a Python virtual environment with the torch==2.11.0 wheel (its libtorch is what we link),
#      created once and reused (default: ~/.cache/exprun/venv, override with EXPRUN_VENV),
#   3. CMake configure + build (ccache, precompiled torch header) into ./build (EXPRUN_BUILD_DIR).
# Sourced by scripts/main.sh and scripts/test.sh; safe to run again and again.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}"
BUILD="${EXPRUN_BUILD_DIR:-$ROOT/build}"
TORCH_VERSION="2.11.0"
TORCHVISION_VERSION="0.26.0"
JOBS="${EXPRUN_JOBS:-2}"

APT_PACKAGES=(build-essential cmake ninja-build git ccache python3-venv pkg-config
  libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libcli11-dev doctest-dev
  zlib1g-dev libjpeg62-turbo-dev libpng-dev libgloo-dev dataset-fashion-mnist
  chromium clang libclang-rt-14-dev munge slurmctld slurmd slurm-client libcurl4-openssl-dev fortunes)  # chromium: headless rendering of the HTML report in tests/cli/report_html_test.sh;
# clang + its runtimes: the spec loader's fuzz target (libFuzzer, ASan, UBSan; bench/fuzz_spec.sh);
# munge + slurm-wlm's daemons and commands: the real one-machine cluster of tests/cli/slurm_test.sh;
# libcurl: output.mlflow's HTTP client; fortunes: the text the baby GPT learns (experiments/text/)

log() { printf '[setup] %s\n' "$*" >&2; }
# Each step's seconds go to the log, so that a slow fresh set-up says where its time went.
STEP_T0=$EPOCHREALTIME
SETUP_T0=$EPOCHREALTIME
step_done() {
  local now=$EPOCHREALTIME
  awk -v a="$STEP_T0" -v b="$now" -v s="$1" 'BEGIN { printf "[setup] %-30s %7.1f s\n", s ":", b - a }' >&2
  STEP_T0=$now
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  step_done "Debian packages"
fi

PY="${EXPRUN_PYTHON:-python3}"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating virtual environment $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, torchvision, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" 2>/dev/null; then
  log "installing torch==$TORCH_VERSION torchvision==$TORCHVISION_VERSION into $VENV (large download, once)"
  "$VENV/bin/pip" install -q --disable-pip-version-check "torch==$TORCH_VERSION" "torchvision==$TORCHVISION_VERSION"
  step_done "torch + torchvision wheels"
fi
# nvJPEG (data.decode: gpu): the build needs its header, a run on a GPU its library, which the
# torch wheel does not bring; pip's nvidia-nvjpeg puts both beside the wheel's CUDA libraries.
NVJPEG_VERSION=13.0.4.44
if ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(0 if m.version('nvidia-nvjpeg') == '$NVJPEG_VERSION' else 1)" 2>/dev/null; then
  log "installing nvidia-nvjpeg==$NVJPEG_VERSION into $VENV (the header and library of data.decode: gpu)"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps "nvidia-nvjpeg==$NVJPEG_VERSION"
  step_done "nvidia-nvjpeg"
fi
# The packages only the tests and benches use, installed in the background while exprun builds
# (the build needs torch alone; pip is mostly download and unpacking): safetensors, the test that
# loads `exprun export` files into torchvision's model; tensorboard, the test that reads exprun's
# event files back with EventAccumulator; mlflow, the tracking server the MLflow test starts on
# loopback and its Python client that reads the run back (tests/cli/mlflow_test.sh); transformers,
# the GPT2LMHeadModel the gpt plugin's logits are compared with (random weights, nothing downloaded).
PIP_LOG="$(mktemp)"
pip_pid=""
if ! "$VENV/bin/python" -c "import safetensors, tensorboard, mlflow, transformers" 2>/dev/null; then
  log "installing safetensors, tensorboard, mlflow and transformers into $VENV (in the background, during the build)"
  (
    t0=$EPOCHREALTIME
    "$VENV/bin/pip" install -q --disable-pip-version-check "safetensors==0.8.0" "tensorboard==2.21.0" "mlflow==3.17.2" \
      "transformers==5.25.0"
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "[setup] %-30s %7.1f s\n", "test packages (background):", b - a }'
  ) >"$PIP_LOG" 2>&1 &
  pip_pid=$!
fi
TORCH_PREFIX="$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/exprun/ccache}"
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$ROOT}"  # cache hits across clones in other folders
# Ninja: it tracks each object's command line, so a re-configure (a plugin file added or removed)
# rebuilds that file and relinks, where the Makefile generator rebuilt every object. A build folder
# made by another generator is configured afresh.
if [[ -f "$BUILD/CMakeCache.txt" ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD/CMakeCache.txt"; then
  log "re-configuring $BUILD for Ninja"
  rm -rf "$BUILD/CMakeCache.txt" "$BUILD/CMakeFiles"
fi
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  log "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DEXPRUN_PYTHON="$VENV/bin/python" >&2
  step_done "cmake configure"
fi
log "building ($JOBS jobs)"
cmake --build "$BUILD" -j "$JOBS" >&2
step_done "build"
if [[ -n $pip_pid ]]; then
  if ! wait "$pip_pid"; then
    cat "$PIP_LOG" >&2
    log "error: pip could not install safetensors, tensorboard and mlflow into $VENV (above)"
    rm -f "$PIP_LOG"
    exit 1
  fi
  cat "$PIP_LOG" >&2
  step_done "waiting for the background pip"
fi
rm -f "$PIP_LOG"
# The text corpus of experiments/text/: the Fortune cookies of Debian's `fortunes` package (2.6 MB,
# every file of it in name order), as character tokens (exprun prepare-text) in build/text/fortunes.
TEXT="$BUILD/text/fortunes"
if [[ ! -f "$TEXT/meta.json" ]]; then
  mkdir -p "$BUILD/text"
  (cd /usr/share/games/fortunes && find . -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' -printf '%f\n' | LC_ALL=C sort |
     xargs cat) >"$BUILD/text/fortunes.txt"
  "$BUILD/exprun" prepare-text "$BUILD/text/fortunes.txt" "$TEXT" >&2
  step_done "text corpus"
fi
STEP_T0=$SETUP_T0
step_done "set-up in all"
export EXPRUN_BIN="$BUILD/exprun"
export EXPRUN_VENV="$VENV"
export EXPRUN_BUILD_DIR="$BUILD"
