#!/usr/bin/env bash
# heaplab demo: build, then import the bundled real trace (SPEC 456.hmmer, in
# Compact Memory Traces text format), validate it and print its statistics.
# (Later this will also capture and replay.)
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

heading "Import $INPUT -> $TRACE"
"$HEAPLAB" import --from cmt-text "$INPUT" -o "$TRACE"

heading "Check $TRACE"
"$HEAPLAB" check "$TRACE"

heading "Stats $TRACE"
"$HEAPLAB" stats "$TRACE"
