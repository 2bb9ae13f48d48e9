#!/usr/bin/env python3
"""Replaying traces of many threads (issue 19): `churn N 5` is captured for
each N (N threads making 40 calls each), then `heaplab replay --no-memory`
replays it --reps times; the median wall time of the whole command and the
replay's own wall time (threads started to last thread done) are printed.
Start-up is what grows with the threads: creating them and starting them.

Usage: scripts/bench-replay-threads.py [--threads 1000,3000,10000] [--reps 3] [--limit 600]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/); a command
still running after --limit seconds is stopped and reported as such.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")
CHURN = os.path.join(REPO, "build", "capture", "testprogs", "churn")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1000,3000,10000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", type=float, default=600)
    a = ap.parse_args()
    for p in (HEAPLAB, CHURN):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-bench-threads-")
    try:
        print(f"build: {BUILD}")
        print("| recorded threads | calls | whole `heaplab replay` | replay wall |")
        print("|---|---|---|---|")
        for n in [int(x) for x in a.threads.split(",")]:
            trace = os.path.join(work, f"t{n}.hlt")
            cap = subprocess.run([os.path.join(REPO, "build", "cli", "heaplab"), "capture", "-q", "-o", trace, "--",
                                  CHURN, str(n), "5"], capture_output=True, text=True)
            if cap.returncode != 0:
                sys.exit(f"bench: capture of {n} threads failed: {cap.stderr.strip()[-400:]}")
            whole, inner, calls = [], [], 0
            for _ in range(a.reps):
                out = os.path.join(work, "r.json")
                t0 = time.monotonic()
                try:
                    r = subprocess.run([HEAPLAB, "replay", trace, "-q", "--no-memory", "-o", out],
                                       capture_output=True, text=True, timeout=a.limit)
                except subprocess.TimeoutExpired:
                    whole = None
                    break
                whole.append(time.monotonic() - t0)
                if r.returncode != 0:
                    sys.exit(f"bench: replay of {n} threads exited {r.returncode}: {r.stderr.strip()[-400:]}")
                j = json.load(open(out))
                inner.append(j["replay"]["wall_s"])
                calls = j["trace"]["calls"]
            if whole is None:
                print(f"| {n} | | still running after {a.limit:.0f} s | |", flush=True)
                continue
            print(f"| {n} | {calls:,} | {statistics.median(whole):.2f} s | {statistics.median(inner):.2f} s |",
                  flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
