#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and
# runs the trace reader fuzzer for SECONDS (default 60) on 2 workers.
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
export HEAPLAB_BUILD_DIR="$REPO/build-fuzz"
CC=clang CXX=clang++ "$REPO/scripts/bootstrap.sh" -DHEAPLAB_FUZZ=ON \
  -DHEAPLAB_SANITIZE=address,undefined -DHEAPLAB_BENCHMARKS=OFF
corpus="$HEAPLAB_BUILD_DIR/fuzz-corpus"
mkdir -p "$corpus"
# Seed with real traces: the golden CLI trace and the bundled hmmer import.
"$HEAPLAB_BUILD_DIR/cli/heaplab" import --from cmt-text "$REPO/cli/testdata/small.cmt" \
  -o "$corpus/small.hlt" --codec none 2>/dev/null
{ printf '\0'; cat "$corpus/small.hlt"; } > "$corpus/small.seed" && rm "$corpus/small.hlt"
"$HEAPLAB_BUILD_DIR/capture/format/trace_reader_fuzz" -max_total_time="$SECONDS_TO_RUN" \
  -jobs=2 -workers=2 -max_len=65536 "$corpus"
