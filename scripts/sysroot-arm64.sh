#!/usr/bin/env bash
# Prepares the aarch64 cross build: installs the host's cross compiler and qemu-user, and
# extracts (never installs) the arm64 Debian packages slimflow builds against, with what they
# depend on, into build/sysroot-arm64, so the host's own libraries stay untouched (some -dev
# packages cannot be installed for two architectures at once). Safe to rerun: when the sysroot
# holds this script's package list already, it does nothing and needs no network.
set -euo pipefail
cd "$(dirname "$0")/.."

sysroot=build/sysroot-arm64
debs=build/sysroot-arm64-debs
host_tools=(g++-aarch64-linux-gnu qemu-user)
# What the build finds with find_package / find_library (see CMakeLists.txt), for arm64.
# Header-only ones are architecture-independent packages, named without ":arm64".
packages=(
  libdnnl-dev:arm64 libprotobuf-dev:arm64 libonnx-dev:arm64 libyaml-cpp-dev:arm64
  libfmt-dev:arm64 zlib1g-dev:arm64 libstb-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64
  libcli11-dev nlohmann-json3-dev
)
# The cross compiler brings its own C library headers and link files (same glibc version);
# taking them from arm64 packages too would put a second libc on the include path.
in_toolchain='^(libc6-dev|linux-libc-dev|libcrypt-dev|libnsl-dev|libtirpc-dev|rpcsvc-proto)$'

installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" == ii* ]]
}
missing=()
for tool in "${host_tools[@]}"; do installed "$tool" || missing+=("$tool"); done
if ! dpkg --print-foreign-architectures | grep -x arm64 >/dev/null; then
  if [[ $EUID -ne 0 ]]; then
    echo "sysroot-arm64: the arm64 architecture is not enabled; rerun as root" >&2
    exit 1
  fi
  dpkg --add-architecture arm64
  apt-get update
elif ! apt-cache show libdnnl-dev:arm64 >/dev/null 2>&1; then
  apt-get update  # enabled elsewhere, but the arm64 package lists were never fetched
fi
if ((${#missing[@]} > 0)); then
  if [[ $EUID -ne 0 ]]; then
    echo "sysroot-arm64: missing host packages: ${missing[*]}; rerun as root" >&2
    exit 1
  fi
  echo "sysroot-arm64: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

stamp="$sysroot/.packages"
wanted="${packages[*]}"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$wanted" ]]; then
  echo "sysroot-arm64: $sysroot is up to date"
  exit 0
fi

# The dependency closure, breadth first: a virtual dependency (<name>) is met by its first
# provider; what the cross toolchain provides is left out with all it depends on.
declare -A seen=()
closure=()
queue=("${packages[@]}")
while ((${#queue[@]} > 0)); do
  level=()
  for package in "${queue[@]}"; do
    [[ -n "${seen[$package]:-}" || "${package%:arm64}" =~ $in_toolchain ]] && continue
    seen[$package]=1
    level+=("$package")
  done
  ((${#level[@]} > 0)) || break
  closure+=("${level[@]}")
  mapfile -t next < <(
    apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
      --no-enhances "${level[@]}" |
      awk '/^ .(Pre)?Depends: </ { virtual = 1; next }
           /^ .(Pre)?Depends: / { virtual = 0; print $2; next }
           /^    / && virtual { virtual = 0; print $1 }'
  )
  queue=()
  # An unqualified name is an architecture-independent package (kept) or a host tool meeting a
  # Multi-Arch: foreign dependency (left out: the build runs none of them).
  for package in "${next[@]}"; do
    [[ -n "${seen[$package]:-}" ]] && continue
    if [[ "$package" == *:arm64 ]] ||
      apt-cache show --no-all-versions "$package" | grep -x 'Architecture: all' >/dev/null; then
      queue+=("$package")
    fi
  done
done
echo "sysroot-arm64: ${#closure[@]} packages"

mkdir -p "$debs"
to_fetch=()
for package in "${closure[@]}"; do
  compgen -G "$debs/${package%:arm64}_*.deb" >/dev/null || to_fetch+=("$package")
done
if ((${#to_fetch[@]} > 0)); then
  (cd "$debs" && apt-get download -o APT::Sandbox::User=root "${to_fetch[@]}")
fi

rm -rf "$sysroot"
mkdir -p "$sysroot"
for package in "${closure[@]}"; do
  for deb in "$debs/${package%:arm64}_"*.deb; do dpkg-deb -x "$deb" "$sysroot"; done
done
# Absolute links (e.g. libz.so -> /lib/...) must point into the sysroot, not at the host.
find "$sysroot" -type l -lname '/*' | while read -r link; do
  ln -sfr "$sysroot$(readlink "$link")" "$link"
done
echo "$wanted" > "$stamp"
echo "sysroot-arm64: done ($(du -sh "$sysroot" | cut -f1) in $sysroot)"
