#!/usr/bin/env bash
# Builds a libFuzzer target with clang (ASan + UBSan) in build-fuzz/ and runs
# it for SECONDS (default 60) on 2 workers:
#   trace_reader_fuzz (default)  the trace reader, seeded with real traces
#   normalise_fuzz               the raw-capture reader and the normaliser
# Only the libraries a target needs are built with clang: Debian's libfmt is
# built with GCC and does not link into clang builds.
#   scripts/fuzz.sh [SECONDS] [TARGET]
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
TARGET="${2:-trace_reader_fuzz}"
case "$TARGET" in
  trace_reader_fuzz | normalise_fuzz) ;;
  *) echo "fuzz: unknown target '$TARGET' (trace_reader_fuzz or normalise_fuzz)" >&2; exit 2 ;;
esac
FUZZ_BUILD="$REPO/build-fuzz"
# Packages and the normal build (its heaplab makes the seed corpus).
"$REPO/scripts/bootstrap.sh"
HEAPLAB="${HEAPLAB_BUILD_DIR:-$REPO/build}/cli/heaplab"
if [[ ! -f "$FUZZ_BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S "$REPO" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHEAPLAB_FUZZ=ON -DHEAPLAB_SANITIZE=address,undefined -DHEAPLAB_BENCHMARKS=OFF
fi
cmake --build "$FUZZ_BUILD" --target "$TARGET"
if [[ "$TARGET" == normalise_fuzz ]]; then
  corpus="$FUZZ_BUILD/normalise-corpus"
  mkdir -p "$corpus"
  cd "$FUZZ_BUILD"
  exec "$FUZZ_BUILD/capture/normalise/normalise_fuzz" -max_total_time="$SECONDS_TO_RUN" \
    -jobs=2 -workers=2 -max_len=8192 "$corpus"
fi
corpus="$FUZZ_BUILD/fuzz-corpus"
mkdir -p "$corpus"
for codec in none lz4 zstd; do
  "$HEAPLAB" import --from cmt-text "$REPO/cli/testdata/small.cmt" -o "$corpus/small.hlt" \
    --codec "$codec" 2>/dev/null
  { printf '\0'; cat "$corpus/small.hlt"; } > "$corpus/small-$codec.seed"
  { printf '\1'; cat "$corpus/small.hlt"; } > "$corpus/small-$codec-repaired.seed"
done
rm -f "$corpus/small.hlt"
cd "$FUZZ_BUILD"
"$FUZZ_BUILD/capture/format/trace_reader_fuzz" -max_total_time="$SECONDS_TO_RUN" \
  -jobs=2 -workers=2 -max_len=65536 "$corpus"
