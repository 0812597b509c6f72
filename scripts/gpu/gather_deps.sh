#!/usr/bin/env bash
# Purpose: for a GPU host without package access (the device machine: torch 2.11 + CUDA 13 +
# CMake + ninja, but no yaml-cpp, spdlog, ...): download this machine's Debian packages of
# exprun's other dependencies (apt-get download) and unpack them (dpkg -x) into .deps/, an
# ignored folder that travels with the working tree. scripts/gpu/run_checks.sh builds against it.
# Also unpacks Fashion-MNIST (dataset-fashion-mnist) for the test suite. About 40 MB.
# Usage: scripts/gpu/gather_deps.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEPS="$ROOT/.deps"
PKGS=(libyaml-cpp-dev libyaml-cpp0.7 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libcli11-dev nlohmann-json3-dev
  doctest-dev libgloo-dev libjpeg62-turbo-dev libjpeg62-turbo libpng-dev libpng16-16 zlib1g-dev zlib1g
  dataset-fashion-mnist)
rm -rf "$DEPS"
mkdir -p "$DEPS/debs" "$DEPS/root"
(cd "$DEPS/debs" && apt-get download "${PKGS[@]}" >/dev/null)
for d in "$DEPS"/debs/*.deb; do dpkg -x "$d" "$DEPS/root"; done
rm -rf "$DEPS/debs" "$DEPS/root/usr/share/doc" "$DEPS/root/usr/share/man"
# Absolute library symlinks (zlib's points at /lib/...) become relative ones inside .deps.
find "$DEPS/root" -type l | while read -r l; do
  t="$(readlink "$l")"
  if [[ $t == /* ]]; then ln -sfn "$DEPS/root$t" "$l" && ln -sfn "$(realpath --relative-to="$(dirname "$l")" "$DEPS/root$t")" "$l"; fi
done
du -sh "$DEPS"
echo "[gather_deps] unpacked ${#PKGS[@]} packages into $DEPS" >&2
