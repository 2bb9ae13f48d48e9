#!/usr/bin/env bash
# heaplab demo: build; capture a real program (Debian's sqlite3 building,
# indexing and querying a 20,000-row table) with the LD_PRELOAD shim, on
# glibc and on jemalloc, mimalloc and tcmalloc; check the traces and print
# their statistics; replay the glibc capture on all four allocators, each
# loaded both ways (LD_PRELOAD and linked directly), and print heaplab's
# side-by-side table (time, heap RSS, fragmentation at the live peak, page
# faults, latency); then import the bundled SPEC 456.hmmer trace (Compact
# Memory Traces text format) and replay it the same way; last, run the
# quick-start experiment (experiments/quick-start.yaml: repeated, interleaved
# runs into the results store, the comparison table with significance);
# capture a real multi-threaded server under load (Debian's redis-server
# driven by redis-benchmark, scripts/redis-workload.sh), replay it on the four
# allocators at its recorded pace (experiments/redis.yaml), write the
# dashboard, and end with the server's four-allocator table and the
# dashboard's path (results/dashboard/index.html).
#
# Usage: scripts/demo.sh
# Environment: HEAPLAB_BUILD_DIR  build directory (default: <repo>/build)
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
BUILD_DIR="${HEAPLAB_BUILD_DIR:-$REPO/build}"
HEAPLAB="$BUILD_DIR/cli/heaplab"
INPUT="capture/testdata/cmt/456.hmmer.test.txt.bz2"
TRACE="results/456.hmmer.hlt"

if (($# > 0)); then
  echo "demo: takes no arguments (usage: scripts/demo.sh)" >&2
  exit 2
fi

heading() { printf '\n=== %s ===\n' "$*"; }

heading "Build (scripts/bootstrap.sh)"
HEAPLAB_BUILD_DIR="$BUILD_DIR" bash scripts/bootstrap.sh

mkdir -p results

SQL="scripts/sqlite3-workload.sql"

for alloc in glibc jemalloc mimalloc tcmalloc; do
  heading "Capture sqlite3 on $alloc -> results/sqlite3.$alloc.hlt"
  "$HEAPLAB" capture --allocator "$alloc" -o "results/sqlite3.$alloc.hlt" -- \
    sqlite3 :memory: -init /dev/null -cmd ".read $SQL" </dev/null >/dev/null
  "$HEAPLAB" check "results/sqlite3.$alloc.hlt"
done

heading "Stats results/sqlite3.glibc.hlt"
"$HEAPLAB" stats results/sqlite3.glibc.hlt

# replay_all TRACE: one replay in full (glibc, preloaded), then every
# allocator and load mode in turn with heaplab's own side-by-side table.
replay_all() {
  local trace="$1" base
  base="results/$(basename "$trace" .hlt)"
  "$HEAPLAB" replay --list-allocators
  heading "Replay $trace on glibc -> $base.replay.glibc.json"
  "$HEAPLAB" replay "$trace" --allocator glibc --latency 16 -o "$base.replay.glibc.json"
  heading "Replay $trace on every allocator, preloaded and linked directly -> $base.compare.json"
  "$HEAPLAB" replay "$trace" --allocator all --load both --latency 16 -o "$base.compare.json"
}

replay_all results/sqlite3.glibc.hlt

heading "Import $INPUT -> $TRACE"
"$HEAPLAB" import --from cmt-text "$INPUT" -o "$TRACE"

heading "Check $TRACE"
"$HEAPLAB" check "$TRACE"

heading "Stats $TRACE"
"$HEAPLAB" stats "$TRACE"

replay_all "$TRACE"

heading "Experiment experiments/quick-start.yaml -> results/heaplab.db"
# sqlite3 captured afresh, replayed on the four allocators: a warm-up and five
# measured runs each, interleaved; medians, spread, ratio to glibc and
# significance.
"$HEAPLAB" run experiments/quick-start.yaml

heading "Capture a server under load: redis-server and redis-benchmark -> results/redis.hlt"
# Debian's redis-server (main and I/O threads) on a Unix socket, driven by
# redis-benchmark for a few seconds, on glibc's malloc (scripts/redis-workload.sh).
HEAPLAB="$HEAPLAB" scripts/redis-workload.sh results/redis.hlt
"$HEAPLAB" check results/redis.hlt
"$HEAPLAB" stats results/redis.hlt

heading "Experiment experiments/redis.yaml -> results/heaplab.db"
# The server's trace replayed at its recorded pace on the four allocators: a
# warm-up and four measured runs each, interleaved; plots next to the store.
"$HEAPLAB" run experiments/redis.yaml -q
"$HEAPLAB" report --experiment redis --plots results/plots >/dev/null

heading "Dashboard (every session in results/heaplab.db)"
"$HEAPLAB" dashboard

heading "redis-server under load on glibc, jemalloc, mimalloc and tcmalloc (heaplab report --experiment redis)"
"$HEAPLAB" report --experiment redis
echo
echo "Dashboard: $REPO/results/dashboard/index.html"
