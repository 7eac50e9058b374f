#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the release build, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, then an aarch64 cross build whose tests
# run under qemu. Safe to rerun.
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

echo "== fuzz the model-file loader and the ONNX importer (libFuzzer, 30 s each)"
bash scripts/fuzz.sh 30 model
bash scripts/fuzz.sh 30 onnx

echo "== aarch64 cross build and tests under qemu-aarch64"
# The whole suite: on 2 cores about 12 minutes (arm64 sysroot 25 s the first time, cross build
# 6 min, tests under qemu 6 min).
bash scripts/build.sh aarch64
ctest --preset aarch64
