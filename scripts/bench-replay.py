#!/usr/bin/env python3
"""Replay against the real thing, side by side in one run: a program
(default capture/testprogs/churn, 2 threads churning a std::map of strings)
is captured once, then for each allocator the program itself runs with the
allocator preloaded (what a user would otherwise do to compare allocators)
and `heaplab replay` replays the capture on it, in both load modes. Runs are
interleaved (native, preload replay, direct replay, next allocator, ...) so
machine noise hits all alike; medians are reported.

Reported per allocator: the program's wall time; the replay's wall time
(calls only, the replayer's own measurement) and the whole `heaplab replay`
command (plan building, replayer start-up, JSON); and the allocator ranking
each gives.

Usage: scripts/bench-replay.py [--reps N] [--threads T] [--ops N]
Needs a build (scripts/bootstrap.sh).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
ALLOCATORS = {
    "glibc": "",
    "jemalloc": "libjemalloc.so.2",
    "mimalloc": "libmimalloc.so.2",
    "tcmalloc": "libtcmalloc.so.4",
}


def run(cmd, env=None):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    a = ap.parse_args()
    heaplab = os.path.join(BUILD, "cli", "heaplab")
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    for p in (heaplab, churn):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    prog = [churn, str(a.threads), str(a.ops)]
    work = tempfile.mkdtemp(prefix="heaplab-bench-replay-")
    trace = os.path.join(work, "churn.hlt")
    run([heaplab, "capture", "-q", "-o", trace, "--"] + prog)
    result = os.path.join(work, "r.json")
    native = {k: [] for k in ALLOCATORS}
    replay = {(k, m): [] for k in ALLOCATORS for m in ("preload", "direct")}
    command = {(k, m): [] for k in ALLOCATORS for m in ("preload", "direct")}
    calls = 0
    for _ in range(a.reps):
        for alloc, lib in ALLOCATORS.items():
            env = dict(os.environ)
            if lib:
                env["LD_PRELOAD"] = lib
            native[alloc].append(run(prog, env))
            for mode in ("preload", "direct"):
                dt = run([heaplab, "replay", trace, "-q", "--allocator", alloc, "--load", mode, "-o", result])
                r = json.load(open(result))
                if not r["replay"]["faithful"]:
                    sys.exit(f"bench: replay on {alloc} ({mode}) was not faithful")
                calls = r["trace"]["calls"]
                command[(alloc, mode)].append(dt)
                replay[(alloc, mode)].append(r["replay"]["wall_s"])
    med = statistics.median
    print(f"program: {' '.join(os.path.relpath(x, REPO) if x.startswith(REPO) else x for x in prog)}"
          f" ({calls:,} heap calls); medians of {a.reps} interleaved runs")
    print()
    print("| allocator | program run on it | replay (preload) | replay (direct) | `heaplab replay` command (preload) |")
    print("|---|---|---|---|---|")
    for alloc in ALLOCATORS:
        print(f"| {alloc} | {med(native[alloc]):.3f} s | {med(replay[(alloc, 'preload')]):.3f} s"
              f" ({calls / med(replay[(alloc, 'preload')]) / 1e6:.0f} M calls/s)"
              f" | {med(replay[(alloc, 'direct')]):.3f} s | {med(command[(alloc, 'preload')]):.2f} s |")
    print()
    rank = lambda d: " < ".join(sorted(ALLOCATORS, key=lambda k: med(d(k))))
    print(f"fastest first, program:          {rank(lambda k: native[k])}")
    print(f"fastest first, replay (preload): {rank(lambda k: replay[(k, 'preload')])}")
    print(f"fastest first, replay (direct):  {rank(lambda k: replay[(k, 'direct')])}")


if __name__ == "__main__":
    main()
