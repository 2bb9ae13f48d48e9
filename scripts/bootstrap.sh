#!/usr/bin/env bash
# Install any missing Debian packages, then configure and build heaplab.
#
# Usage: scripts/bootstrap.sh [extra cmake configure args...]
#   e.g. scripts/bootstrap.sh -DHEAPLAB_SANITIZE=address,undefined
#
# Environment:
#   HEAPLAB_BUILD_DIR  build directory (default: <repo>/build)
#
# Idempotent: packages already installed are left alone, and an existing
# Ninja build directory is not reconfigured unless extra args are given.
set -euo pipefail

# Debian (bookworm) packages needed to build, test and run heaplab:
#   toolchain:     build-essential cmake ninja-build pkg-config git ccache (the build
#                  compiles through it when present: a clean clone rebuilds from cache)
#   tests/benches: libgtest-dev libgmock-dev libbenchmark-dev
#   compression:   libzstd-dev zlib1g-dev libbz2-dev liblzma-dev
#   libraries:     libxxhash-dev libcli11-dev libfmt-dev nlohmann-json3-dev libhwloc-dev
#                  (pinning replay threads), libyaml-cpp-dev (experiment files),
#                  libsqlite3-dev (the results store), libipt-dev (Intel PT decoding),
#                  libprotobuf-dev protobuf-compiler (export --perfetto: Perfetto's protobuf
#                  messages compiled by protoc; its test decodes the files with protoc)
#   Intel PT route: linux-perf (perf to record and, for two of the three decoders,
#                  to decode; perf_dlfilter.h for heaplab's dlfilter)
#   command-line compressors (test data, demo): zstd xz-utils bzip2 gzip
#   allocators to run captured programs on: libjemalloc2 libmimalloc2.0 libgoogle-perftools4
#   and their headers, for the replayers linked against them (direct load):
#   libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev
#   real programs and the reference tool (capture tests, demo, overhead
#   benchmark): sqlite3 heaptrack python3; the demo's server: redis-server
#   redis-tools (redis-benchmark, redis-cli)
#   the dashboard's charting library: libjs-chart.js (Chart.js, embedded at build time)
#   the dashboard's browser test: chromium; Google Benchmark's compare.py
#   on exported results: libbenchmark-tools python3-scipy
#   heaplab run --slurm's test, a single-node cluster: slurmctld slurmd slurm-client munge
#   the CI gate's test: python3-yaml (reads the README's CI files), libxml2-utils
#   (xmllint checks the JUnit XML against experiments/junit.xsd)
#   instruction counts for benchmarks on noisy machines: valgrind (callgrind,
#   scripts/bench-instructions.py)
PACKAGES="build-essential cmake ninja-build pkg-config git ccache
  libgtest-dev libgmock-dev libbenchmark-dev
  libzstd-dev zlib1g-dev libbz2-dev liblzma-dev liblz4-dev
  libxxhash-dev libcli11-dev libfmt-dev nlohmann-json3-dev libhwloc-dev libyaml-cpp-dev libsqlite3-dev libipt-dev
  libprotobuf-dev protobuf-compiler
  zstd xz-utils bzip2 gzip lz4 clang clang-format clang-tidy
  libjemalloc2 libmimalloc2.0 libgoogle-perftools4 sqlite3 heaptrack python3 chromium redis-server redis-tools
  libbenchmark-tools python3-scipy linux-perf libjs-chart.js python3-yaml libxml2-utils valgrind
  slurmctld slurmd slurm-client munge
  libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev"

say() { echo "bootstrap: $*"; }
die() { echo "bootstrap: error: $*" >&2; exit 1; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${HEAPLAB_BUILD_DIR:-$REPO/build}"

# --- packages ---------------------------------------------------------------
missing=()
for pkg in $PACKAGES; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  say "all required packages are installed"
else
  say "missing packages: ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    SUDO=()
  elif command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    die "not root and sudo is not available; please install: ${missing[*]}"
  fi
  say "running apt-get update"
  "${SUDO[@]}" apt-get update || die "apt-get update failed"
  say "installing: ${missing[*]}"
  if ! "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "${missing[@]}"; then
    die "apt-get install failed for: ${missing[*]}"
  fi
  still=()
  for pkg in "${missing[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || still+=("$pkg")
  done
  ((${#still[@]} == 0)) || die "packages still not installed after apt-get: ${still[*]}"
  say "packages installed"
fi

# --- configure ----------------------------------------------------------------
if [[ -f "$BUILD_DIR/build.ninja" && $# -eq 0 ]]; then
  say "using existing configuration in $BUILD_DIR"
else
  if [[ -f "$BUILD_DIR/CMakeCache.txt" && ! -f "$BUILD_DIR/build.ninja" ]] &&
     ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$BUILD_DIR/CMakeCache.txt"; then
    die "$BUILD_DIR was configured with a different CMake generator; remove it or set HEAPLAB_BUILD_DIR"
  fi
  say "configuring $BUILD_DIR${*:+ with: $*}"
  cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
fi

# --- build --------------------------------------------------------------------
say "building in $BUILD_DIR"
cmake --build "$BUILD_DIR" -j"$(nproc)"
say "build finished: $BUILD_DIR"
