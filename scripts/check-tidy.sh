#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy's checks) over heaplab's library and program
# sources (not tests, benchmarks, fuzz targets or the shim), two at a time,
# with the build's compile_commands.json. A file whose text, the text of
# every heaplab header and .clang-tidy are unchanged since it last passed is
# not checked again (the cache is in ${XDG_CACHE_HOME:-~/.cache}/heaplab-tidy,
# beside ccache's, so a clean clone on the same machine reuses it).
# Prints each finding; exits 1 if any, 2 if clang-tidy or the build is missing.
#   scripts/check-tidy.sh [BUILD_DIR]     (default: build)
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
BUILD="${1:-$REPO/build}"
CLANG_TIDY="${CLANG_TIDY:-clang-tidy}"
command -v "$CLANG_TIDY" >/dev/null 2>&1 || { echo "check-tidy: error: $CLANG_TIDY not found (apt-get install clang-tidy)" >&2; exit 2; }
[[ -f "$BUILD/compile_commands.json" ]] || { echo "check-tidy: error: no $BUILD/compile_commands.json (build first)" >&2; exit 2; }
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/heaplab-tidy"
mkdir -p "$CACHE"
# What every file's verdict depends on besides itself.
common="$( { cat .clang-tidy; git ls-files '*.h' | xargs cat; "$CLANG_TIDY" --version; } | sha1sum | cut -c1-40)"
mapfile -t files < <(git ls-files '*.cpp' | grep -vE '_test\.cpp$|_bench\.cpp$|_fuzz\.cpp$|^capture/shim/|/testprogs/|/testalloc/')
todo=()
for f in "${files[@]}"; do
  key="$( { echo "$common"; cat "$f"; } | sha1sum | cut -c1-40)"
  [[ -f "$CACHE/$key" ]] || todo+=("$f:$key")
done
echo "check-tidy: ${#files[@]} files, $((${#files[@]} - ${#todo[@]})) unchanged since they passed, ${#todo[@]} to check"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
check_one() {
  local f="${1%%:*}" key="${1##*:}" log
  if log="$("$CLANG_TIDY" -p "$BUILD" --quiet "$f" 2>/dev/null)"; then
    touch "$CACHE/$key"
  else
    printf '%s\n' "$log" | grep -E '^[^ ].*: (error|warning): ' || echo "$f: clang-tidy failed"
  fi
}
export -f check_one
export CLANG_TIDY BUILD CACHE
if ((${#todo[@]})); then
  printf '%s\n' "${todo[@]}" | xargs -P "$(nproc)" -I{} bash -c 'check_one "$@"' _ {} > "$out" || true
fi
if [[ -s "$out" ]]; then
  cat "$out"
  echo "check-tidy: $(grep -c ': error: \|: warning: \|clang-tidy failed' "$out") finding(s)"
  exit 1
fi
echo "check-tidy: clean"
