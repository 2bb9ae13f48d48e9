#!/usr/bin/env python3
"""What measuring costs a replay: the same capture replayed with memory
measurement off (--no-memory), on at the default (sampling every 10 ms, the
snapshot at the live-peak call, page footprint by mincore, page faults),
sampling every millisecond, and with latency timing on 1 call in 16 and on
every call. Runs are interleaved (one of each configuration in a shuffled
order, then the next round) so machine noise hits all alike; the replay's own wall time (calls
only) is compared, medians reported, each as a ratio to memory off. By
default one replay thread pinned to a core, so that the sampler has a core
of its own (on 2 cores, 2 replay threads and the sampler share them, and
run-to-run noise is +-20%).

Issue 5's target: full memory metrics at most 10% slower than none
(latency timing aside, which is reported for what it is).

Usage: scripts/bench-metrics-cost.py [--reps N] [--threads T] [--pin P] [--ops N]
Needs a build (scripts/bootstrap.sh).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
CONFIGS = [
    ("memory off (--no-memory)", ["--no-memory"]),
    ("memory on, sampled every 10 ms (the default)", []),
    ("memory on, sampled every 1 ms", ["--sample-ms", "1"]),
    ("latency on 1 call in 16, memory off", ["--no-memory", "--latency", "16"]),
    ("latency on every call, memory off", ["--no-memory", "--latency", "1"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=11)
    ap.add_argument("--threads", type=int, default=1,
                    help="replay threads (default 1: with --pin compact the sampler has the other core)")
    ap.add_argument("--pin", default="compact")
    ap.add_argument("--ops", type=int, default=2000000)
    a = ap.parse_args()
    heaplab = os.path.join(BUILD, "cli", "heaplab")
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    for p in (heaplab, churn):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-bench-metrics-")
    trace = os.path.join(work, "churn.hlt")
    subprocess.run([heaplab, "capture", "-q", "-o", trace, "--", churn, "2", str(a.ops)], check=True,
                   stdout=subprocess.DEVNULL)
    out = os.path.join(work, "r.json")
    walls = {name: [] for name, _ in CONFIGS}
    calls = 0
    rng = random.Random(5)
    for _ in range(a.reps):
        # Each round in a new order: whatever the previous replay leaves
        # behind (a 600 MB plan being freed) falls on every configuration.
        for name, opts in rng.sample(CONFIGS, len(CONFIGS)):
            r = subprocess.run([heaplab, "replay", trace, "-q", "--threads", str(a.threads), "--pin", a.pin, "-o", out] + opts,
                               capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"bench: replay {' '.join(opts)} exited {r.returncode}: {r.stderr.strip()}")
            j = json.load(open(out))
            calls = j["trace"]["calls"]
            walls[name].append(j["replay"]["wall_s"])
    med = statistics.median
    base = med(walls[CONFIGS[0][0]])
    print(f"`churn 2 {a.ops}` capture ({calls:,} calls) on {a.threads} replay thread(s), --pin {a.pin}, glibc; "
          f"replay wall time, medians of {a.reps} interleaved runs")
    print()
    print("| configuration | replay wall | vs memory off |")
    print("|---|---|---|")
    for name, _ in CONFIGS:
        m = med(walls[name])
        print(f"| {name} | {m:.3f} s | {m / base:.2f}x |")


if __name__ == "__main__":
    main()
