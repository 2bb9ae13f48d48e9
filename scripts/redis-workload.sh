#!/usr/bin/env bash
# A real multi-threaded server under load, captured: Debian's redis-server
# (its main thread and an I/O thread that reads and parses requests, background
# threads) on a Unix socket, driven by redis-benchmark (16 clients, 8-deep
# pipelines, 200-byte values over 50,000 random keys: SET, GET, LPUSH, LPOP,
# SADD, HSET, ZADD, MSET), then shut down. The server runs on glibc's malloc
# (redis-server is linked against jemalloc; `--allocator glibc` preloads
# heaplab's forwarder to glibc: scripts/../README.md, "capture").
#
# Usage: scripts/redis-workload.sh OUT.hlt [REQUESTS]   (default 100000 per test)
# Environment: HEAPLAB (default: <repo>/build/cli/heaplab),
#              HEAPLAB_CAPTURE_ALLOCATOR (default: glibc)
# Exits with heaplab capture's status (0: the trace is complete), 2 on errors.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
HEAPLAB="${HEAPLAB:-$REPO/build/cli/heaplab}"
ALLOCATOR="${HEAPLAB_CAPTURE_ALLOCATOR:-glibc}"

die() {
  echo "redis-workload: error: $*" >&2
  exit 2
}

(($# >= 1 && $# <= 2)) || die "usage: scripts/redis-workload.sh OUT.hlt [REQUESTS]"
OUT="$1"
REQUESTS="${2:-100000}"
[[ "$REQUESTS" =~ ^[1-9][0-9]*$ ]] || die "REQUESTS: a positive number of requests per test, not '$REQUESTS'"
for tool in redis-server redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install redis-server redis-tools; scripts/bootstrap.sh installs them)"
done
[[ -x "$HEAPLAB" ]] || die "$HEAPLAB not found (build heaplab first: scripts/bootstrap.sh)"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/heaplab-redis.XXXXXX")"
SOCK="$WORK/redis.sock"
CAPTURE_PID=""
cleanup() {
  # A server still running (a failed benchmark) is shut down, never left
  # behind: SIGTERM to heaplab capture reaches the server too.
  if [[ -n "$CAPTURE_PID" ]] && kill -0 "$CAPTURE_PID" 2>/dev/null; then
    redis-cli -s "$SOCK" shutdown nosave >/dev/null 2>&1 || true
    sleep 1
    kill -TERM "$CAPTURE_PID" 2>/dev/null || true
    wait "$CAPTURE_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$HEAPLAB" capture --allocator "$ALLOCATOR" -o "$OUT" -- \
  redis-server --port 0 --unixsocket "$SOCK" --save "" --appendonly no --io-threads 2 --io-threads-do-reads yes \
  --daemonize no --loglevel warning --dir "$WORK" >"$WORK/redis.log" 2>"$WORK/capture.log" &
CAPTURE_PID=$!

for _ in $(seq 100); do
  [[ -S "$SOCK" ]] && break
  kill -0 "$CAPTURE_PID" 2>/dev/null || { cat "$WORK/capture.log" >&2; die "redis-server did not start under heaplab capture"; }
  sleep 0.1
done
[[ -S "$SOCK" ]] || die "redis-server did not open $SOCK within 10 s"

redis-benchmark -s "$SOCK" -n "$REQUESTS" -c 16 -P 8 -d 200 -r 50000 -t set,get,lpush,lpop,sadd,hset,zadd,mset -q \
  | tr '\r' '\n' | grep 'requests per second' || die "redis-benchmark failed"
redis-cli -s "$SOCK" shutdown nosave >/dev/null 2>&1 || true

# The server exits on the shutdown; if it has not within 60 s, SIGTERM to
# heaplab capture, which passes it on to the server.
for _ in $(seq 600); do
  kill -0 "$CAPTURE_PID" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$CAPTURE_PID" 2>/dev/null && kill -TERM "$CAPTURE_PID"
status=0
wait "$CAPTURE_PID" || status=$?
CAPTURE_PID=""
grep '^heaplab capture:' "$WORK/capture.log" >&2 || cat "$WORK/capture.log" >&2
exit "$status"
