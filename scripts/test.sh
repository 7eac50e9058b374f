#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the release build, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== release build and tests"
bash scripts/build.sh release
ctest --preset release

echo "== ASan + UBSan build and tests"
bash scripts/build.sh asan
# oneDNN's JIT and OpenMP runtime allocate at exit in ways LeakSanitizer reports as leaks in
# third-party code; ASan's memory-error checks and UBSan stay on.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset asan

echo "== fuzz the model-file loader (libFuzzer, 30 s)"
bash scripts/fuzz.sh 30
