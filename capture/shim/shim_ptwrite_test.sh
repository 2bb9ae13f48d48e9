#!/usr/bin/env bash
# The shim's ptwrite sink on a CPU without ptwrite (these VMs): it must
# never execute the instruction (SIGILL). By default it refuses before the
# program's main with one line and exit 127; with
# HEAPLAB_CAPTURE_NO_PTWRITE=fallback it records into files. Also: the
# sink's code is there (ptwrite instructions in the library).
# Usage: shim_ptwrite_test.sh PATH/libheaplab_capture.so
set -euo pipefail
so="$1"
n=$(objdump -d "$so" | grep -c 'ptwrite' || true)
if (( n < 5 )); then
  echo "FAIL: $so has $n ptwrite instructions (expected the sink's five per event, inlined in the hooks)"
  exit 1
fi
if grep -qw ptwrite /proc/cpuinfo; then
  echo "ok: $n ptwrite instructions; this CPU has ptwrite: the refusal is not tested here"
  exit 0
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {  # the program is the captured root: the shell's pid, kept by exec
  HEAPLAB_CAPTURE_DIR="$dir" HEAPLAB_CAPTURE_SINK=ptwrite "$@" \
    bash -c 'export HEAPLAB_CAPTURE_ROOT=$$ LD_PRELOAD="'"$so"'"; exec /bin/echo ran' 2>"$dir/err" >"$dir/out"
}
status=0
run env || status=$?
want="heaplab capture: this CPU has no ptwrite (CPUID.(EAX=14H,ECX=0):EBX[4] is 0); refusing to run the program (HEAPLAB_CAPTURE_NO_PTWRITE=fallback records into files instead)"
if [[ $status != 127 || "$(cat "$dir/err")" != "$want" || -s "$dir/out" ]]; then
  echo "FAIL: refusal: exit $status, stderr: $(cat "$dir/err"), stdout: $(cat "$dir/out")"
  exit 1
fi
status=0
run env HEAPLAB_CAPTURE_NO_PTWRITE=fallback || status=$?
want="heaplab capture: this CPU has no ptwrite (CPUID.(EAX=14H,ECX=0):EBX[4] is 0); recording into files instead"
if [[ $status != 0 || "$(cat "$dir/err")" != "$want" || "$(cat "$dir/out")" != ran ]] || ! ls "$dir"/*.0.hlraw >/dev/null 2>&1; then
  echo "FAIL: fallback: exit $status, stderr: $(cat "$dir/err"), files: $(ls "$dir")"
  exit 1
fi
echo "ok: $n ptwrite instructions, never executed here: refused (exit 127) or recorded into files"
