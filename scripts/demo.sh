#!/usr/bin/env bash
# heaplab demo: build; capture a real program (Debian's sqlite3 building,
# indexing and querying a 20,000-row table) with the LD_PRELOAD shim, on
# glibc and on jemalloc, mimalloc and tcmalloc; check the traces and print
# their statistics; replay the glibc capture on all four allocators, each
# loaded both ways (LD_PRELOAD and linked directly), and print the
# comparison; then import the bundled SPEC 456.hmmer trace (Compact Memory
# Traces text format) and replay it the same way. (RSS over time, latency
# and the dashboard come with issues 5 to 7.)
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

SQL="results/demo.sql"
cat > "$SQL" <<'SQL_EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<20000)
INSERT INTO t SELECT x, printf('name-%d-%s', x, hex(randomblob(8))), x*1.5 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name-1%';
UPDATE t SET name = upper(name) WHERE id % 7 = 0;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
SQL_EOF

for alloc in glibc jemalloc mimalloc tcmalloc; do
  heading "Capture sqlite3 on $alloc -> results/sqlite3.$alloc.hlt"
  "$HEAPLAB" capture --allocator "$alloc" -o "results/sqlite3.$alloc.hlt" -- \
    sqlite3 :memory: -init /dev/null -cmd ".read $SQL" </dev/null >/dev/null
  "$HEAPLAB" check "results/sqlite3.$alloc.hlt"
done

heading "Stats results/sqlite3.glibc.hlt"
"$HEAPLAB" stats results/sqlite3.glibc.hlt

# replay_all TRACE: replays TRACE on every allocator and load mode, prints
# each replay's summary, then one comparison table.
replay_all() {
  local trace="$1" base
  base="results/$(basename "$trace" .hlt)"
  "$HEAPLAB" replay --list-allocators
  for alloc in glibc jemalloc mimalloc tcmalloc; do
    for load in preload direct; do
      heading "Replay $trace on $alloc ($load) -> $base.replay.$alloc.$load.json"
      "$HEAPLAB" replay "$trace" --allocator "$alloc" --load "$load" --latency 16 \
        -o "$base.replay.$alloc.$load.json"
    done
  done
  heading "Comparison: $trace"
  python3 - "$base" <<'PY_EOF'
import json, sys
base = sys.argv[1]
print(f"{'allocator':<10} {'load':<8} {'wall s':>7} {'M calls/s':>9} {'heap peak MiB':>13} {'frag.':>6}"
      f" {'malloc p99 ns':>13} {'free p99 ns':>11} {'exact':>6}")
for alloc in ("glibc", "jemalloc", "mimalloc", "tcmalloc"):
    for load in ("preload", "direct"):
        r = json.load(open(f"{base}.replay.{alloc}.{load}.json"))
        p = r["replay"]
        m = p.get("memory", {})
        lat = p.get("latency", {}).get("ops", {})
        p99 = lambda op: f"{lat[op]['p99_ns']:.0f}" if op in lat else "-"
        # Fragmentation only where the samples caught most of the live peak.
        frag = lambda m: (f"{m['fragmentation']['at_live_peak']:.2f}"
                          if m.get("live_peak_sampled_fraction", 0) >= 0.5 else "-")
        print(f"{alloc:<10} {load:<8} {p['wall_s']:>7.3f} {p['calls_per_s'] / 1e6:>9.2f}"
              f" {m.get('heap_peak_kib', 0) / 1024:>13.1f} {frag(m):>6}"
              f" {p99('malloc'):>13} {p99('free'):>11} {'yes' if p['calls_match'] else 'NO':>6}")
print("heap peak: anonymous RSS less the replayer's own bookkeeping, sampled every 10 ms;"
      " frag.: heap RSS / live bytes at the sampled live peak (-: the samples missed the peak);"
      " latency: 1 call in 16 timed")
PY_EOF
}

replay_all results/sqlite3.glibc.hlt

heading "Import $INPUT -> $TRACE"
"$HEAPLAB" import --from cmt-text "$INPUT" -o "$TRACE"

heading "Check $TRACE"
"$HEAPLAB" check "$TRACE"

heading "Stats $TRACE"
"$HEAPLAB" stats "$TRACE"

replay_all "$TRACE"
