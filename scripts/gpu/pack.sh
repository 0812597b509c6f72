#!/usr/bin/env bash
# Purpose: packs a CUDA build of exprun for the lent GPU machine, which has torch 2.11.0+cu130 in its
# python3 but none of exprun's other libraries (yaml-cpp, spdlog, libcurl, ...) and no package
# registry, so it cannot configure exprun. Run here after scripts/setup.sh, from the project root:
#   scripts/gpu/pack.sh [BUILD] [FOLDER]        (default: build .gpu-carry)
# then the device tool: run with carry [".gpu-carry"], command "bash .gpu-carry/bench.sh [DEADLINE_S]".
# bin/: exprun, exprun_tests (its GPU-only cases run there) and exprun_bench_data and exprun_bench_bnact when built, stripped;
# lib/: every library ldd shows that is neither glibc's nor torch's/NVIDIA's (those come from the
# device's torch); proj/: specs, the eager references, the JPEG tree generator; nanogpt/: nanoGPT's
# model.py from NANOGPT (default /tmp/nanogpt), when there. About 40 MB.
# EXPRUN_PACK_CHECK=1: also starts the packed binaries here with only the carried libraries and the
# venv's torch on the library path (the rehearsal of the device's start-up).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
B="${1:-$ROOT/build}"
G="${2:-$ROOT/.gpu-carry}"
here="$ROOT/scripts/gpu"
[[ -x $B/exprun ]] || { echo "pack.sh: no $B/exprun (run scripts/setup.sh first)" >&2; exit 2; }
cmake --build "$B" --target exprun_bench_data exprun_bench_bnact >&2  # the JPEG pipeline's and the fused batch norm's checks; not in the default build
rm -rf "$G"
mkdir -p "$G/bin" "$G/lib" "$G/proj"
for t in exprun exprun_bench_data exprun_bench_bnact tests/exprun_tests; do
  [[ -x $B/$t ]] && cp "$B/$t" "$G/bin/"
done
strip "$G"/bin/*
for f in "$G"/bin/*; do
  ldd "$f" | awk '/=> \//{print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libgcc_s* | libstdc++* | libresolv* | libutil.so*) ;;
      libtorch* | libc10* | libcu* | libnv* | libnccl* | libgomp* | libshm* | libcaffe2*) ;;
      *) [[ -e $G/lib/$name ]] || cp -L "$path" "$G/lib/$name" ;;
    esac
  done
done
# nvJPEG (data.decode: gpu) is loaded at run time, so ldd does not list it; the device's torch lacks it.
VENV_NV="$("${EXPRUN_VENV:-$HOME/.cache/exprun/venv}/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/../nvidia/cu13/lib")')"
[[ -e $VENV_NV/libnvjpeg.so.13 ]] && cp -L "$VENV_NV/libnvjpeg.so.13" "$G/lib/"
(cd "$ROOT" && tar cf - experiments bench/gpu_eager.py bench/gpu_gpt_eager.py tests/fixtures/make_image_tree.py tests/fixtures/photos) |
  tar xf - -C "$G/proj"
# nanoGPT's model.py, the GPT-2 step's peer, from a copy of its repository (NANOGPT; bench/nanogpt_race.sh's).
if [[ -f ${NANOGPT:-/tmp/nanogpt}/model.py ]]; then mkdir -p "$G/nanogpt" && cp "${NANOGPT:-/tmp/nanogpt}/model.py" "$G/nanogpt/"; fi
# The GPU-only tests train on Fashion-MNIST's first images; the device has no dataset package.
python3 "$here/fashion_prefix.py" /usr/share/datasets/fashion-mnist "$G/proj/fashion-mnist"
cp "$here/bench.sh" "$here/paths.py" "$here/rn50-jpeg.yaml" "$here/bnbench.py" "$here/kernels.py" "$G/"
grep -qxF "/$(basename "$G")/" "$ROOT/.git/info/exclude" 2>/dev/null || echo "/$(basename "$G")/" >>"$ROOT/.git/info/exclude"
if [[ ${EXPRUN_PACK_CHECK:-0} == 1 ]]; then
  VENV="${EXPRUN_VENV:-$HOME/.cache/exprun/venv}"
  TL="$("$VENV/bin/python" -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib")')"
  NV="$TL/../../nvidia"
  for f in "$G"/bin/*; do
    if LD_LIBRARY_PATH="$G/lib:$TL:$NV/cu13/lib:$NV/cudnn/lib:$NV/nccl/lib" ldd "$f" | grep -q "not found"; then
      echo "pack.sh: $f lacks a library with the carried ones:" >&2
      LD_LIBRARY_PATH="$G/lib:$TL" ldd "$f" | grep "not found" >&2
      exit 1
    fi
  done
  LD_LIBRARY_PATH="$G/lib:$TL:$NV/cu13/lib:$NV/cudnn/lib:$NV/nccl/lib" "$G/bin/exprun" plugins model >/dev/null
  echo "pack.sh: the packed binaries start with the carried libraries and torch's" >&2
fi
du -sh "$G"
