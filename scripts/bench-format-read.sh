#!/usr/bin/env bash
# Reading (and, for comparison, writing) a real trace: heaplab's decoder over the bundled SPEC 456.hmmer
# trace (180,216 events) in each chunk codec, against merely decompressing
# the same trace kept as CMT text (what a text-based tool must do before it
# even parses a line). Medians of REPS runs; prints a Markdown table. The
# text rows time whole processes, so they include process start-up (~1 ms).
#   scripts/bench-format-read.sh [REPS]      (build first: scripts/bootstrap.sh)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${HEAPLAB_BUILD_DIR:-$REPO/build}"
HEAPLAB="$BUILD/cli/heaplab"
BENCH="$BUILD/capture/format/trace_bench"
SRC="$REPO/capture/testdata/cmt/456.hmmer.test.txt.bz2"
EVENTS=180216
REPS="${1:-7}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
[[ -x "$BENCH" ]] || { echo "bench-format-read: $BENCH not built (run scripts/bootstrap.sh)" >&2; exit 1; }

echo "| reading 456.hmmer ($EVENTS events) | M events/s (median of $REPS) |"
echo "|---|---|"
for codec in none lz4 zstd; do
  "$HEAPLAB" import --from cmt-text "$SRC" -o "$tmp/h.$codec.hlt" --codec "$codec" 2>/dev/null
  rate=$(HEAPLAB_BENCH_TRACE="$tmp/h.$codec.hlt" "$BENCH" --benchmark_filter=BM_DecodeFile \
           --benchmark_repetitions="$REPS" --benchmark_format=json 2>/dev/null |
         python3 -c 'import json,sys; r=[b for b in json.load(sys.stdin)["benchmarks"] if b.get("aggregate_name")=="median"]; print("%.1f" % (r[0]["items_per_second"]/1e6))')
  echo "| heaplab decode, .hlt ($codec) | $rate |"
done
bzcat "$SRC" > "$tmp/t.txt"
xz -9e -T1 -k -c "$tmp/t.txt" > "$tmp/t.xz"
zstd -19 -q -c "$tmp/t.txt" > "$tmp/t.zst"
cp "$SRC" "$tmp/t.bz2"
median_rate() {  # CMD... ; prints M events/s of the median wall time over REPS runs
  local times=()
  for ((i = 0; i < REPS; i++)); do
    local s e
    s=$(date +%s%N); "$@" > /dev/null; e=$(date +%s%N)
    times+=($((e - s)))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v ev="$EVENTS" '{a[NR]=$1} END {m=a[int((NR+1)/2)]; printf "%.1f", ev / (m / 1e9) / 1e6}'
}
echo "| text: zstd -d only (no parsing) | $(median_rate zstd -dcq "$tmp/t.zst") |"
echo "| text: xz -d only (no parsing) | $(median_rate xz -dc "$tmp/t.xz") |"
echo "| text: bzip2 -d only (no parsing) | $(median_rate bzip2 -dc "$tmp/t.bz2") |"
echo "| text: heaplab import (decompress + parse + write .hlt) | $(median_rate "$HEAPLAB" import --from cmt-text "$tmp/t.zst" -o "$tmp/re.hlt" 2>/dev/null) |"
echo
echo "| writing 456.hmmer as text instead | M events/s (median of $REPS) |"
echo "|---|---|"
echo "| text: zstd -3 (compress only, no formatting) | $(median_rate zstd -3 -cq "$tmp/t.txt") |"
echo "| text: gzip -6 (compress only, no formatting) | $(median_rate gzip -6 -c "$tmp/t.txt") |"
