#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the release build, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, then an aarch64 cross build whose tests
# run under qemu. Safe to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Each stage's wall time, so that a slow CI run says which stage grew.
stage_started=$SECONDS
stage_done() { echo "== $1 took $((SECONDS - stage_started)) s"; stage_started=$SECONDS; }

echo "== release build and tests"
bash scripts/build.sh release
ctest --preset release
stage_done "release build and tests"

echo "== ASan + UBSan build and tests"
bash scripts/build.sh asan
# oneDNN's JIT and OpenMP runtime allocate at exit in ways LeakSanitizer reports as leaks in
# third-party code; ASan's memory-error checks and UBSan stay on.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 ctest --preset asan
stage_done "ASan + UBSan build and tests"

echo "== fuzz the model-file loader, the ONNX importer and the data-file readers (libFuzzer, 30 s each, side by side)"
bash scripts/fuzz.sh 30 all
stage_done "fuzzing"

echo "== aarch64 cross build and tests under qemu-aarch64"
# The suite less thirteen end-to-end training runs (SLIMFLOW_TEST_FILTER in CMakePresets.json):
# resident memory (qemu's, under emulation), kill-and-resume, pruning schedules, the two-device
# split, mid-epoch resume, freeze round trip, a trained model's int8 accuracy and two zoo models
# (mobilenet, squeezenet). None has ARM-specific code beyond the kernels their own tests cover.
# Under qemu on a 2-core Xeon the last six took 18 of the other tests' 37 CPU-minutes (the first
# seven took 11 of 29 on an EPYC). ARM's kernels,
# training, quantization, binary, distillation, the zoo's other models and ONNX tests all run,
# on an emulated core without SVE (NEON, like the boards we deploy to); oneDNN's SVE-512 kernel
# tests run once more on an SVE-512 core (cmake/aarch64-linux-gnu.cmake says why).
bash scripts/build.sh aarch64
ctest --preset aarch64
stage_done "aarch64 build and tests"
