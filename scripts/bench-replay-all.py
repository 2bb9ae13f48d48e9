#!/usr/bin/env python3
"""What `heaplab replay --allocator all` costs beyond its replays (issue 16):
a program is captured once (default capture/testprogs/churn, 2 threads),
then `heaplab replay TRACE --allocator all` runs --reps times; each run's
wall time is set against the sum of its four replays' own wall times (the
replayer's measurement, calls only), with the time spent building plans.

Usage: scripts/bench-replay-all.py [--reps N] [--threads T] [--ops N]
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
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="heaplab-replay-all-")
    trace = os.path.join(work, "churn.hlt")
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    subprocess.run([HEAPLAB, "capture", "-q", "-o", trace, "--", churn, str(a.threads), str(a.ops)], check=True,
                   stdout=subprocess.DEVNULL)
    rows = []
    for _ in range(a.reps):
        out = os.path.join(work, "all.json")
        t0 = time.monotonic()
        r = subprocess.run([HEAPLAB, "replay", trace, "-q", "--allocator", "all", "-o", out], capture_output=True,
                           text=True)
        wall = time.monotonic() - t0
        if r.returncode != 0:
            sys.exit(f"bench-replay-all: replay failed: {r.stderr.strip()}")
        results = json.load(open(out))
        replays = sum(x["replay"]["wall_s"] for x in results)
        builds = sum(x.get("plan_build_s", 0) for x in results)
        reused = sum(1 for x in results if x.get("plan_reused"))
        rows.append((wall, replays, builds, reused, len(results), results[0]["trace"]["calls"]))
    wall = statistics.median(r[0] for r in rows)
    replays = statistics.median(r[1] for r in rows)
    builds = statistics.median(r[2] for r in rows)
    print(f"{rows[0][5]:,} calls, {rows[0][4]} allocators, medians of {a.reps} runs")
    print(f"  heaplab replay --allocator all   {wall:8.2f} s")
    print(f"  the replays' own wall times      {replays:8.2f} s")
    print(f"  ratio                            {wall / replays:8.2f}x")
    print(f"  plan building (all replays)      {builds:8.2f} s  ({rows[0][3]} of {rows[0][4]} reused the first plan)")


if __name__ == "__main__":
    main()
