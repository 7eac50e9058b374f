#!/usr/bin/env bash
# Fuzzes the .sfm model loader with libFuzzer (clang, AddressSanitizer, UBSan).
# Usage: scripts/fuzz.sh [seconds, default 60]. Exits non-zero when the fuzzer finds a crash;
# crashing inputs are left in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
build=build/fuzz
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSLIMFLOW_BUILD_BENCH=OFF "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target model_file_fuzzer model_file_make_seeds

corpus="$build/corpus"
mkdir -p "$corpus" "$build/artifacts"
"$build/tests/model_file_make_seeds" "$corpus"
# A leak counts as a failure too: a rejected model must free everything it built.
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  "$build/tests/model_file_fuzzer" "$corpus" -max_total_time="$seconds" -timeout=10 \
  -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$build/artifacts/" -print_final_stats=1
