#!/usr/bin/env bash
# The shim must load into any program: it may depend on libc only (no
# libstdc++, no libgcc_s), and every symbol it needs must come from glibc.
# Usage: shim_deps_test.sh PATH/libheaplab_capture.so
set -euo pipefail
so="$1"
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if [[ "$needed" != "libc.so.6 " ]]; then
  echo "FAIL: $so needs: $needed(expected only libc.so.6)"
  exit 1
fi
# Undefined symbols: all versioned from GLIBC, except the weak toolchain hooks.
bad=$(nm -D --undefined-only "$so" | awk '$1 != "w" && $2 !~ /@GLIBC_/ {print $2}')
if [[ -n "$bad" ]]; then
  echo "FAIL: $so has undefined symbols not from glibc: $bad"
  exit 1
fi
# It must define every entry point the trace format records.
for sym in malloc calloc realloc reallocarray free memalign posix_memalign aligned_alloc valloc pvalloc \
    _Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t _ZnwmSt11align_val_t _ZnamSt11align_val_t \
    _ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t \
    _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZdlPvSt11align_val_t _ZdaPvSt11align_val_t \
    _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t \
    _ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t; do
  if ! nm -D --defined-only "$so" | awk '{print $3}' | grep -qx "$sym"; then
    echo "FAIL: $so does not define $sym"
    exit 1
  fi
done
echo "ok: $so needs only libc.so.6 and defines all 30 entry points"
