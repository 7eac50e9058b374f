#!/usr/bin/env bash
# Configures and builds one CMake preset (default: release). Usage: scripts/build.sh [preset]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
# The cross build needs the cross compiler, qemu and the arm64 libraries first.
if [[ "$preset" == aarch64 ]]; then bash scripts/sysroot-arm64.sh; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)"
