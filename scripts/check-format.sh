#!/usr/bin/env bash
# Checks that every C and C++ file git tracks is formatted as .clang-format
# says (clang-format --dry-run -Werror). Prints each file that is not, and
# how to fix it; exits 1 if any, 2 if clang-format is missing.
#   scripts/check-format.sh          check
#   scripts/check-format.sh --fix    reformat them in place
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check-format: error: $CLANG_FORMAT not found (apt-get install clang-format)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.cc' '*.cpp' '*.h' '*.hpp')
if [[ "${1:-}" == "--fix" ]]; then
  "$CLANG_FORMAT" --style=file -i "${files[@]}"
  echo "check-format: formatted ${#files[@]} files"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  "$CLANG_FORMAT" --style=file --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
# One naming style for tests: GoogleTest suites and tests in UpperCamelCase
# (Suite.WhatItShows).
mapfile -t badnames < <(grep -nE '^(TEST|TEST_F|TEST_P)\(([a-z_][A-Za-z0-9_]*|[A-Z][A-Za-z0-9]*_[A-Za-z0-9_]*), *|^(TEST|TEST_F|TEST_P)\([A-Za-z0-9_]+, *([a-z_][A-Za-z0-9_]*|[A-Z][A-Za-z0-9]*_[A-Za-z0-9_]*)\)' "${files[@]}" | grep -vE '\([A-Z][A-Z0-9_]*, ' || true)
for b in "${badnames[@]}"; do echo "check-format: ${b%%:*}: test not named in UpperCamelCase: ${b#*:}"; done
if ((${#badnames[@]})); then
  bad+=("${badnames[@]}")
fi
if ((${#bad[@]})); then
  for f in "${bad[@]}"; do echo "check-format: $f: not formatted as .clang-format says"; done
  echo "check-format: ${#bad[@]} of ${#files[@]} files need formatting (scripts/check-format.sh --fix)"
  exit 1
fi
echo "check-format: all ${#files[@]} files formatted as .clang-format says"
