#!/usr/bin/env bash
# Purpose: fuzz the spec loader (tests/fuzz/SpecFuzz.cpp: YAML text + --set strings → a resolved
# spec or a SpecError) with clang's libFuzzer under AddressSanitizer (leaks included) and
# UndefinedBehaviorSanitizer, against the real plugins' option declarations (`exprun plugins
# --json`, so the fuzzer's catalog cannot drift from the real one), seeded with every spec in
# experiments/, a few hostile ones and the inputs that found bugs (tests/fuzz/corpus/). Builds the target with clang++ straight from the torch-free
# sources (no CMake; through ccache when there is one), then:
#   bench/fuzz_spec.sh [SECONDS=600]   fuzzes for SECONDS (a growing corpus in $EXPRUN_FUZZ_DIR/corpus;
#                                      a crash, leak, sanitizer report or hang stops it, the input
#                                      saved under artifacts/)
#   bench/fuzz_spec.sh --merge         minimises that corpus and tests/fuzz/corpus into tests/fuzz/corpus
#                                      (checked in: the inputs that reach distinct code)
#   bench/fuzz_spec.sh --ci            what the test suite runs, deterministic: the seeds and the
#                                      checked-in corpus replayed (coverage-guided mutation is not
#                                      reproducible from run to run, so it stays here)
# EXPRUN_BIN: the exprun binary whose catalog is fuzzed (default build/exprun).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${EXPRUN_FUZZ_DIR:-$ROOT/build-fuzz}"
CXX="${EXPRUN_FUZZ_CXX:-clang++}"
EXE="${EXPRUN_BIN:-$ROOT/build/exprun}"
command -v ccache >/dev/null && CXX="ccache $CXX"
mkdir -p "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
SRC=(runner/spec/Options.cpp runner/spec/Spec.cpp runner/spec/Sections.cpp runner/spec/Catalog.cpp
     runner/util/Log.cpp runner/util/Format.cpp tests/fuzz/SpecFuzz.cpp)
BIN="$OUT/spec_fuzz"
newest=$(cd "$ROOT" && ls -t "${SRC[@]}" runner/spec/*.h runner/util/*.h | head -1)
FLAGS=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$ROOT")
if [[ ! -x $BIN || $ROOT/$newest -nt $BIN ]]; then  # the sources compiled in parallel, then linked
  echo "building $BIN" >&2
  mkdir -p "$OUT/obj"
  (cd "$ROOT" && printf '%s\n' "${SRC[@]}" |
    xargs -P "$(nproc)" -I{} sh -c 'exec '"$CXX"' "$@" -c "{}" -o "$0/$(basename "{}").o"' "$OUT/obj" "${FLAGS[@]}")
  OBJ=()
  for f in "${SRC[@]}"; do OBJ+=("$OUT/obj/$(basename "$f").o"); done
  $CXX "${FLAGS[@]}" "${OBJ[@]}" -o "$BIN" \
    $(pkg-config --cflags --libs yaml-cpp spdlog 2>/dev/null || echo -lyaml-cpp -lspdlog -lfmt) -lpthread
fi
"$EXE" plugins --json > "$OUT/catalog.json"
export EXPRUN_FUZZ_CATALOG="$OUT/catalog.json"
cp "$ROOT"/experiments/*/*.yaml "$ROOT"/tests/fuzz/corpus/* "$OUT/seeds/" 2>/dev/null || true
printf 'a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\nname: t\nmodel: {type: small_cnn}\ndata: {type: synthetic}\n' >"$OUT/seeds/aliases.yaml"
printf 'name: t\nmodel: {type: small_cnn, width: 8}\ndata: {type: synthetic}\n\0train.epochs=3\nmodel.width=[1]\n' >"$OUT/seeds/sets.bin"
printf 'base: nope.yaml\nname: t\n' >"$OUT/seeds/base.yaml"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
if [[ ${1:-} == --ci ]]; then
  "$BIN" -runs=0 -timeout=10 -artifact_prefix="$OUT/artifacts/" "$OUT"/seeds/* 2>&1 | tail -3
  exit "${PIPESTATUS[0]}"
fi
if [[ ${1:-} == --merge ]]; then
  rm -rf "$OUT/merged" && mkdir -p "$OUT/merged"
  "$BIN" -merge=1 -timeout=10 -max_len=65536 "$OUT/merged" "$ROOT/tests/fuzz/corpus" "$OUT/corpus" 2>&1 | tail -2
  find "$ROOT/tests/fuzz/corpus" -type f ! -name 'invalid-utf8-string.yaml' -delete
  cp "$OUT"/merged/* "$ROOT/tests/fuzz/corpus/"
  echo "tests/fuzz/corpus: $(ls "$ROOT/tests/fuzz/corpus" | wc -l) inputs, $(du -sh "$ROOT/tests/fuzz/corpus" | cut -f1)"
  exit 0
fi
SECONDS_TO_RUN="${1:-600}"
"$BIN" "$OUT/corpus" "$OUT/seeds" -max_total_time="$SECONDS_TO_RUN" -timeout=2 -max_len=65536 \
  -artifact_prefix="$OUT/artifacts/" -print_final_stats=1 2>&1 | tail -25
