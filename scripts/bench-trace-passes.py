#!/usr/bin/env python3
"""The passes that read a whole trace once (issue 16): `heaplab stats`,
`heaplab check` and building the replay plan, each timed start to finish on
one trace, --reps times, medians printed. Plan building is timed by the
replayer's own figure (`plan_build_s` of `heaplab replay --allocator glibc`
with an empty plan directory), so the replay after it does not count.

With --compare BUILD_DIR the same trace goes through that build too, the two
builds' runs interleaved (a noisy machine moves both alike), and the ratio of
this build's median to the other's is printed.

Usage: scripts/bench-trace-passes.py [--trace T.hlt | --threads 2 --ops 2000000]
           [--reps 5] [--compare BUILD_DIR]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
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
PASSES = ("stats", "check", "plan")


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def run_pass(build, name, trace, work):
    """Seconds the pass took with `build`."""
    if name == "plan":
        plans = os.path.join(work, "plans")
        shutil.rmtree(plans, ignore_errors=True)
        out = os.path.join(work, "plan.json")
        r = subprocess.run([heaplab(build), "replay", trace, "-q", "--allocator", "glibc", "-o", out],
                           capture_output=True, text=True, env=dict(os.environ, HEAPLAB_PLAN_DIR=plans))
        if r.returncode != 0:
            sys.exit(f"bench-trace-passes: {build}: replay failed: {r.stderr.strip()}")
        shutil.rmtree(plans, ignore_errors=True)
        with open(out) as f:
            return json.load(f)["plan_build_s"]
    t0 = time.monotonic()
    r = subprocess.run([heaplab(build), name, trace], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench-trace-passes: {build}: {name} failed: {r.stderr.strip()}")
    return wall


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", help="a trace captured before (default: capture churn)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--compare", help="another build directory, measured on the same trace")
    a = ap.parse_args()
    builds = [BUILD] + ([a.compare] if a.compare else [])
    for b in builds:
        if not os.access(heaplab(b), os.X_OK):
            sys.exit(f"bench-trace-passes: {heaplab(b)} not found (scripts/bootstrap.sh builds it)")
    work = tempfile.mkdtemp(prefix="heaplab-trace-passes-")
    try:
        trace = a.trace
        if not trace:
            trace = os.path.join(work, "churn.hlt")
            churn = os.path.join(BUILD, "capture", "testprogs", "churn")
            subprocess.run([heaplab(BUILD), "capture", "-q", "-o", trace, "--", churn, str(a.threads), str(a.ops)],
                           check=True, stdout=subprocess.DEVNULL)
        times = {(b, p): [] for b in builds for p in PASSES}
        for _ in range(a.reps):
            for p in PASSES:
                for b in builds:
                    times[(b, p)].append(run_pass(b, p, trace, work))
        size = os.path.getsize(trace)
        print(f"{trace}: {size / 2**20:.1f} MiB; medians of {a.reps} runs"
              + (", the builds interleaved" if a.compare else ""))
        for p in PASSES:
            meds = [statistics.median(times[(b, p)]) for b in builds]
            line = f"  {p:6} " + "  ".join(f"{b}: {m:.3f} s" for b, m in zip(builds, meds))
            if a.compare:
                line += f"  ({meds[0] / meds[1]:.2f}x the other's)"
            print(line)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
