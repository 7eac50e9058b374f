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
# The suite less seven end-to-end training runs (CMakePresets.json's aarch64 test filter): they
# check resident memory (qemu's, under emulation), kill-and-resume, pruning schedules and the
# two-device split, none of which has ARM-specific code, and under qemu they took 11 of the
# suite's 29 CPU-minutes. ARM's kernels, training, quantization, zoo, distillation and ONNX
# tests all run.
bash scripts/build.sh aarch64
ctest --preset aarch64
