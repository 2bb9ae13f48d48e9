#!/usr/bin/env python3
"""Memory of heaplab's commands on small hostile inputs (issue 19): each
input is made by build/capture/format/make_hostile_traces, each command run
--reps times; the median of its peak RSS (its largest process, heaplab or a child, from
wait4) and of its wall time are printed, with its exit status.

  - deep metadata: a trace whose metadata is --meta-mb MB of '['
  - many threads: a trace of --threads threads of one malloc each

Usage: scripts/bench-hostile-memory.py [--meta-mb 20] [--threads 1048576] [--reps 3]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
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
MAKE = os.path.join(BUILD, "capture", "format", "make_hostile_traces")


def measure(args):
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    return time.monotonic() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meta-mb", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    for p in (HEAPLAB, MAKE):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-bench-hostile-")
    try:
        deep = os.path.join(work, "deep.hlt")
        many = os.path.join(work, "threads.hlt")
        rows = [(f"writing {a.threads:,} threads of one call (the trace writer)", [MAKE, "threads", many,
                                                                                    str(a.threads)])]
        made = {}
        for name, args in rows:
            made[name] = [measure(args) for _ in range(a.reps)]
        subprocess.run([MAKE, "deep-metadata", deep, str(a.meta_mb << 20)], check=True)
        cases = [(f"{a.meta_mb} MB of '[' as metadata: {c}", [HEAPLAB, *c.split(), deep])
                 for c in ("cat --meta", "stats", "check", "replay -q")]
        cases += [(f"{a.threads:,} threads: {c}", [HEAPLAB, *c.split(), many])
                  for c in ("stats", "stats --json", "check", "cat -n 1", "replay -q")]
        print(f"build: {BUILD}")
        print("| input and command | exit | peak RSS | wall |")
        print("|---|---|---|---|")
        for name, runs in list(made.items()) + [(n, [measure(c) for _ in range(a.reps)]) for n, c in cases]:
            wall = statistics.median(r[0] for r in runs)
            rss = statistics.median(r[1] for r in runs)
            print(f"| {name} | {runs[0][2]} | {rss / 1024:,.0f} MiB | {wall:.2f} s |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


main()
