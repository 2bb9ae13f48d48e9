#!/usr/bin/env bash
# Builds heaplab's libFuzzer targets with clang (ASan + UBSan) in build-fuzz/
# and runs them, each for SECONDS (default 60), then prints executions and
# crashes per target. Crash inputs are kept in build-fuzz/fuzz-out/TARGET/.
#   scripts/fuzz.sh [SECONDS] [TARGET|all]        (default: 60 all)
# Targets (each beside the parser it checks, with a ctest driver):
#   trace_reader_fuzz  the trace reader and chunk decoders (capture/format)
#   normalise_fuzz     the raw-capture readers (finished, and live as capture reads them) and the normaliser (capture/normalise)
#   perf_data_fuzz     the perf.data reader (capture/pt)
#   pt_stream_fuzz     the PT packet decoder and ptwrite payload assembler (capture/pt)
#   cmt_text_fuzz      the Compact Memory Traces text importer (capture/import)
#   mtrace_fuzz        glibc's mtrace log importer (capture/import)
#   heaptrack_fuzz     the heaptrack recording importer (capture/import)
#   logalloc_fuzz      the Firefox logalloc log importer (capture/import)
#   spec_fuzz          the experiment file (YAML) parser (experiments)
#   json_fuzz          bounded JSON of users' files: trace metadata (common)
#   linked_fuzz        the ELF reader that finds the allocator a program brings (allocators)
#   plan_fuzz          a replay plan read as the replayer reads a kept one (replay)
# Seeds: real traces and raw captures made by the normal build's heaplab,
# and the ctest drivers' own seeds (HEAPLAB_FUZZ_SEED_DIR).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_TO_RUN="${1:-60}"
WHICH="${2:-all}"
ALL="trace_reader_fuzz normalise_fuzz perf_data_fuzz pt_stream_fuzz cmt_text_fuzz mtrace_fuzz heaptrack_fuzz logalloc_fuzz spec_fuzz json_fuzz linked_fuzz plan_fuzz"
declare -A DIR=([trace_reader_fuzz]=capture/format [normalise_fuzz]=capture/normalise [perf_data_fuzz]=capture/pt
                [pt_stream_fuzz]=capture/pt [cmt_text_fuzz]=capture/import [mtrace_fuzz]=capture/import [heaptrack_fuzz]=capture/import [logalloc_fuzz]=capture/import [spec_fuzz]=experiments [json_fuzz]=common [linked_fuzz]=allocators [plan_fuzz]=replay)
declare -A DRIVER=([perf_data_fuzz]=perf_data_fuzz_test [pt_stream_fuzz]=pt_stream_fuzz_test
                   [cmt_text_fuzz]=cmt_text_fuzz_test [mtrace_fuzz]=mtrace_fuzz_test [heaptrack_fuzz]=heaptrack_fuzz_test [logalloc_fuzz]=logalloc_fuzz_test [spec_fuzz]=spec_fuzz_test [json_fuzz]=json_fuzz_test [linked_fuzz]=linked_fuzz_test [plan_fuzz]=plan_fuzz_test)
if [[ "$WHICH" == all ]]; then
  targets=($ALL)
elif [[ -n "${DIR[$WHICH]:-}" ]]; then
  targets=("$WHICH")
else
  echo "fuzz: unknown target '$WHICH' (all, or one of: $ALL)" >&2
  exit 2
fi
[[ "$SECONDS_TO_RUN" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz: SECONDS must be a positive whole number, not '$SECONDS_TO_RUN'" >&2; exit 2; }

FUZZ_BUILD="$REPO/build-fuzz"
BUILD="${HEAPLAB_BUILD_DIR:-$REPO/build}"
# Packages and the normal build (its heaplab and ctest drivers make the seeds).
"$REPO/scripts/bootstrap.sh" >/dev/null
HEAPLAB="$BUILD/cli/heaplab"
if [[ ! -f "$FUZZ_BUILD/build.ninja" ]]; then
  CC=clang CXX=clang++ cmake -S "$REPO" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHEAPLAB_FUZZ=ON -DHEAPLAB_SANITIZE=address,undefined -DHEAPLAB_BENCHMARKS=OFF >/dev/null
fi
cmake --build "$FUZZ_BUILD" --target "${targets[@]}"

seed() {  # seed TARGET CORPUS
  local t="$1" corpus="$2"
  case "$t" in
    trace_reader_fuzz)
      for codec in none lz4 zstd; do
        "$HEAPLAB" import --from cmt-text "$REPO/cli/testdata/small.cmt" -o "$corpus/small.hlt" --codec "$codec" 2>/dev/null
        { printf '\0'; cat "$corpus/small.hlt"; } > "$corpus/small-$codec.seed"
        { printf '\1'; cat "$corpus/small.hlt"; } > "$corpus/small-$codec-repaired.seed"
      done
      rm -f "$corpus/small.hlt" ;;
    normalise_fuzz) ;;  # starts from nothing: the raw layout is small
    *)
      HEAPLAB_FUZZ_SEED_DIR="$corpus" "$BUILD/${DIR[$t]}/${DRIVER[$t]}" >/dev/null 2>&1 || true ;;
  esac
}

results=()
for t in "${targets[@]}"; do
  corpus="$FUZZ_BUILD/fuzz-corpus/$t"
  out="$FUZZ_BUILD/fuzz-out/$t"
  mkdir -p "$corpus" "$out"
  seed "$t" "$corpus"
  log="$out/run.log"
  echo "fuzz: $t for ${SECONDS_TO_RUN} s (corpus $corpus)"
  ( cd "$out" && "$FUZZ_BUILD/${DIR[$t]}/$t" -max_total_time="$SECONDS_TO_RUN" -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$out/" "$corpus" ) > "$log" 2>&1 || true
  execs="$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -n 1 || true)"
  crashes="$(find "$out" -maxdepth 1 -name 'crash-*' -o -maxdepth 1 -name 'leak-*' -o -maxdepth 1 -name 'timeout-*' | wc -l)"
  results+=("$(printf '%-18s %8s s %14s %8s' "$t" "$SECONDS_TO_RUN" "${execs:-?}" "$crashes")")
done
printf '%-18s %10s %14s %8s\n' target time executions crashes
printf '%s\n' "${results[@]}"
