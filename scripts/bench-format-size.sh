#!/usr/bin/env bash
# Trace size: heaplab's .hlt against what a user would otherwise keep, on the
# bundled SPEC 456.hmmer trace (180,216 events). Prints a Markdown table.
#   scripts/bench-format-size.sh            (build first: scripts/bootstrap.sh)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HEAPLAB="${HEAPLAB_BUILD_DIR:-$REPO/build}/cli/heaplab"
SRC="$REPO/capture/testdata/cmt/456.hmmer.test.txt.bz2"
EVENTS=180216
CMT_BYTES=530655  # published: CMT's binary encoding of this trace (2.94 B/event)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

[[ -x "$HEAPLAB" ]] || { echo "bench-format-size: $HEAPLAB not built (run scripts/bootstrap.sh)" >&2; exit 1; }
bzcat "$SRC" > "$tmp/hmmer.txt"

row() {  # NAME BYTES
  awk -v n="$1" -v b="$2" -v e="$EVENTS" -v c="$CMT_BYTES" \
    'BEGIN { printf "| %s | %d | %.3f | %.2fx |\n", n, b, b / e, c / b }'
}
size() { stat -c %s "$1"; }

echo "| encoding of 456.hmmer ($EVENTS events) | bytes | bytes/event | smaller than CMT by |"
echo "|---|---|---|---|"
for spec in "zstd 3" "zstd 9" "zstd 19" "lz4 1" "none 1"; do
  set -- $spec
  "$HEAPLAB" import --from cmt-text "$SRC" -o "$tmp/h.hlt" --codec "$1" --level "$2" 2>/dev/null
  row "heaplab .hlt, $1${2:+ level $2}" "$(size "$tmp/h.hlt")"
done
row "CMT binary (published)" "$CMT_BYTES"
row "text, bzip2 -9 (as distributed)" "$(size "$SRC")"
xz -9e -T1 -k -c "$tmp/hmmer.txt" > "$tmp/t.xz"
row "text, xz -9e" "$(size "$tmp/t.xz")"
zstd -19 -q -c "$tmp/hmmer.txt" > "$tmp/t.zst"
row "text, zstd -19" "$(size "$tmp/t.zst")"
row "text, uncompressed" "$(size "$tmp/hmmer.txt")"
