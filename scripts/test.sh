#!/usr/bin/env bash
# Build and run all heaplab tests.
#
# Usage: scripts/test.sh [--quick]
#   1. normal build in build/ (-DHEAPLAB_WERROR=ON), ctest (which includes
#      the layering, format and golden tests), then clang-tidy
#   2. sanitizer build in build-asan/ (address,undefined; no benchmarks),
#      ctest without the `smoke`-labelled tests        (skipped with --quick)
#   3. thread sanitizer build in build-tsan/ of the threaded code's unit
#      tests (replay engine and plan, normaliser)      (skipped with --quick)
# Ends with one line "N passed, M failed" (both ctest runs together) and
# exits non-zero if any test or any build failed.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BOOTSTRAP="$REPO/scripts/bootstrap.sh"

quick=0
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test: unknown argument '$arg' (usage: scripts/test.sh [--quick])" >&2; exit 2 ;;
  esac
done

total_passed=0
total_failed=0
problems=()
logdir="$(mktemp -d "${TMPDIR:-/tmp}/heaplab-test.XXXXXX")"
trap 'rm -rf "$logdir"' EXIT
# Replay plans the tests build are kept here, not in the user's cache
# (~/.cache/heaplab/plans), and go with the logs.
export HEAPLAB_PLAN_DIR="$logdir/plans"

# run_ctest NAME BUILD_DIR [extra ctest args...]; environment is inherited.
run_ctest() {
  local name="$1" dir="$2"; shift 2
  local log="$logdir/$name.log" rc=0 line total failed
  echo "test: running ctest in $dir"
  ctest --test-dir "$dir" --output-on-failure -j2 --timeout 600 "$@" 2>&1 | tee "$log" || rc=$?
  line="$(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log" | tail -n 1 || true)"
  if [[ -n "$line" ]]; then
    failed="${line%% *}"
    total="${line##* }"
    total_passed=$((total_passed + total - failed))
    total_failed=$((total_failed + failed))
    ((failed == 0)) || problems+=("$name: $failed of $total tests failed")
  elif grep -q 'No tests were found' "$log"; then
    echo "test: warning: $name: ctest found no tests"
  fi
  if ((rc != 0)) && [[ -z "$line" ]]; then
    problems+=("$name: ctest exited with status $rc without a result line")
  fi
}

# --- normal build -------------------------------------------------------------
echo "test: == normal build (build/) =="
if HEAPLAB_BUILD_DIR="$REPO/build" bash "$BOOTSTRAP" -DHEAPLAB_WERROR=ON; then
  run_ctest build "$REPO/build"
else
  problems+=("build/: build failed")
fi

# --- clang-tidy over the sources (.clang-tidy; unchanged files cached) ---------
if [[ -f "$REPO/build/compile_commands.json" ]]; then
  echo "test: == clang-tidy (scripts/check-tidy.sh) =="
  bash "$REPO/scripts/check-tidy.sh" "$REPO/build" || problems+=("clang-tidy: findings (scripts/check-tidy.sh)")
fi

# --- sanitizer build ----------------------------------------------------------
if ((quick)); then
  echo "test: --quick: skipping the sanitizer build"
else
  echo "test: == sanitizer build (build-asan/) =="
  if HEAPLAB_BUILD_DIR="$REPO/build-asan" bash "$BOOTSTRAP" \
      -DHEAPLAB_SANITIZE=address,undefined -DHEAPLAB_BENCHMARKS=OFF -DHEAPLAB_WERROR=ON; then
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      run_ctest build-asan "$REPO/build-asan" -LE smoke
  else
    problems+=("build-asan/: build failed")
  fi
fi

# --- thread sanitizer: the threaded code's unit tests -------------------------
# The replay engine (threads waiting on each other's objects) and the
# normaliser (a writer thread), built with -fsanitize=thread; only these test
# programs, so the step stays short.
TSAN_TARGETS="engine_test plan_test normalise_test raw_live_test"
if ((quick)); then
  echo "test: --quick: skipping the thread sanitizer build"
else
  echo "test: == thread sanitizer build (build-tsan/: $TSAN_TARGETS) =="
  if cmake -S "$REPO" -B "$REPO/build-tsan" -G Ninja -DHEAPLAB_SANITIZE=thread \
        -DHEAPLAB_BENCHMARKS=OFF -DHEAPLAB_WERROR=ON >/dev/null &&
      cmake --build "$REPO/build-tsan" --target $TSAN_TARGETS; then
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
      run_ctest build-tsan "$REPO/build-tsan" -L tsan
  else
    problems+=("build-tsan/: build failed")
  fi
fi

# --- summary ------------------------------------------------------------------
for p in ${problems[@]+"${problems[@]}"}; do
  echo "test: FAILED: $p"
done
echo "$total_passed passed, $total_failed failed"
if ((total_failed > 0 || ${#problems[@]} > 0)); then
  exit 1
fi
