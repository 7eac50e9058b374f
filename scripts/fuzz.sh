#!/usr/bin/env bash
# Fuzzes the loaders with libFuzzer (clang, AddressSanitizer, UBSan): the .sfm model loader
# ("model"), the ONNX importer ("onnx", seeded with the ONNX backend node-test models of
# Debian's libonnx-testdata) and the data-file readers ("data": IDX, .npy, images, the
# bottleneck cache, model specs, checkpoints).
# Usage: scripts/fuzz.sh [seconds per target, default 60] [model|onnx|data|all, default all].
# Exits non-zero when a fuzzer finds a crash; crashing inputs are left in build/fuzz/artifacts/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
which="${2:-all}"
case "$which" in
  model|onnx|data|all) ;;
  *) echo "fuzz.sh: the target must be model, onnx, data or all, got '$which'" >&2; exit 2 ;;
esac
build=build/fuzz
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# The ONNX fuzzer links the engine of the release build (GCC); build that library first. The
# release tree keeps its own configuration: a new compiler launcher would rebuild all of it.
if [[ "$which" == all || "$which" == onnx ]]; then
  cmake --preset release >/dev/null
  cmake --build --preset release -j "$(nproc)" --target slimflow_engine
fi
CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSLIMFLOW_BUILD_BENCH=OFF -DSLIMFLOW_FUZZ_ENGINE_DIR="$PWD/build/release" \
  "${launcher[@]}" >/dev/null
mkdir -p "$build/artifacts"

run_fuzzer() {  # name corpus
  # A leak counts as a failure too: a rejected model must free everything it built.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    "$build/tests/$1" "$2" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$build/artifacts/$1-" -print_final_stats=1
}

targets=()
if [[ "$which" == all || "$which" == model ]]; then targets+=(model_file_fuzzer model_file_make_seeds); fi
if [[ "$which" == all || "$which" == onnx ]]; then targets+=(onnx_fuzzer); fi
if [[ "$which" == all || "$which" == data ]]; then targets+=(data_file_fuzzer data_file_make_seeds); fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"

# The fuzzers run side by side (on 2 cores, three share them); each writes its own log, printed
# when it ends, and any one's failure fails the script.
fuzzers=()
if [[ "$which" == all || "$which" == model ]]; then
  corpus="$build/corpus"
  mkdir -p "$corpus"
  "$build/tests/model_file_make_seeds" "$corpus"
  fuzzers+=(model_file_fuzzer:"$corpus")
fi
if [[ "$which" == all || "$which" == onnx ]]; then
  corpus="$build/onnx-corpus"
  mkdir -p "$corpus"
  for model in /usr/share/libonnx-testdata/data/node/*/model.onnx; do
    [[ -e "$model" ]] || continue
    size=$(stat -c %s "$model")
    if (( size <= 65536 )); then cp "$model" "$corpus/$(basename "$(dirname "$model")").onnx"; fi
  done
  fuzzers+=(onnx_fuzzer:"$corpus")
fi
if [[ "$which" == all || "$which" == data ]]; then
  corpus="$build/data-corpus"
  mkdir -p "$corpus"
  "$build/tests/data_file_make_seeds" "$corpus" models
  fuzzers+=(data_file_fuzzer:"$corpus")
fi
pids=()
for fuzzer in "${fuzzers[@]}"; do
  run_fuzzer "${fuzzer%%:*}" "${fuzzer#*:}" >"$build/${fuzzer%%:*}.log" 2>&1 &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  name="${fuzzers[$i]%%:*}"
  if wait "${pids[$i]}"; then result=passed; else result=FAILED; status=1; fi
  echo "== $name $result ($build/$name.log):"
  tail -n 25 "$build/$name.log"
done
exit "$status"
