#!/usr/bin/env python3
"""What `heaplab replay --allocator all` costs beyond its replays (issue 16):
a program is captured once (default capture/testprogs/churn, 2 threads),
then `heaplab replay TRACE --allocator all` runs --reps times, each time
twice: first with an empty plan directory (the plan is built, once, for all
four replays: "cold"), then again (the plan kept by the first command is
used: "warm"). Each run's wall time is set against the sum of its four
replays' own wall times (the replayer's measurement, calls only), with the
time spent building the plan and the replayer's bookkeeping. A third run
of each repetition ("unkept") is cold with HEAPLAB_PLAN_CACHE_MIB=0: the
plan is built for that command only, never synced to disk (what keeping
the plan for later commands costs the first one is the difference).

With --compare BUILD_DIR, that build runs the same commands on the same
trace, the two builds' repetitions interleaved (a noisy machine moves both
alike), and a table per build is printed.

Usage: scripts/bench-replay-all.py [--reps N] [--threads T] [--ops N] [--trace T.hlt]
           [--compare BUILD_DIR]
  --trace replays a trace captured before (the same one for two builds:
  HEAPLAB_BUILD_DIR names the build) instead of capturing one.
Needs a build (scripts/bootstrap.sh).
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


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def run_all(build, trace, out, plans, extra=None):
    env = dict(os.environ, HEAPLAB_PLAN_DIR=plans)
    env.pop("HEAPLAB_PLAN_CACHE_MIB", None)  # (the caller's limit would make "warm" runs cold)
    env.update(extra or {})
    t0 = time.monotonic()
    r = subprocess.run([heaplab(build), "replay", trace, "-q", "--allocator", "all", "-o", out], capture_output=True,
                       text=True, env=env)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench-replay-all: {build}: replay failed: {r.stderr.strip()}")
    results = json.load(open(out))
    return {
        "wall": wall,
        "replays": sum(x["replay"]["wall_s"] for x in results),
        "build": sum(x.get("plan_build_s", 0) for x in results),
        "sources": [x.get("plan_source", "?") for x in results],
        "calls": results[0]["trace"]["calls"],
        "bookkeeping": max(x["replay"]["bookkeeping_bytes"].get("total", 0) for x in results),
        "plan_total": results[0]["replay"]["bookkeeping_bytes"].get("plan_total", 0),
        "n": len(results),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    ap.add_argument("--trace", help="a trace to replay instead of capturing one")
    ap.add_argument("--compare", help="another build directory, run on the same trace, interleaved")
    a = ap.parse_args()
    builds = [BUILD] + ([os.path.abspath(a.compare)] if a.compare else [])
    if len(set(os.path.realpath(b) for b in builds)) != len(builds):
        sys.exit("bench-replay-all: --compare names the build measured already")
    for b in builds:
        if not os.access(heaplab(b), os.X_OK):
            sys.exit(f"bench-replay-all: {heaplab(b)} not found (build it first: scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-replay-all-")
    try:
        trace = a.trace or os.path.join(work, "churn.hlt")
        if not a.trace:
            churn = os.path.join(BUILD, "capture", "testprogs", "churn")
            subprocess.run([heaplab(BUILD), "capture", "-q", "-o", trace, "--", churn, str(a.threads), str(a.ops)],
                           check=True, stdout=subprocess.DEVNULL)
            os.sync()  # the capture's writeback is not the first replay's
        out = os.path.join(work, "all.json")
        rows = {b: {"cold": [], "warm": [], "unkept": []} for b in builds}
        for rep in range(a.reps):
            for b in builds if rep % 2 == 0 else builds[::-1]:  # (each build first in turn)
                plans = os.path.join(work, "plans")
                shutil.rmtree(plans, ignore_errors=True)
                rows[b]["cold"].append(run_all(b, trace, out, plans))
                rows[b]["warm"].append(run_all(b, trace, out, plans))
                shutil.rmtree(plans, ignore_errors=True)
                rows[b]["unkept"].append(run_all(b, trace, out, plans, {"HEAPLAB_PLAN_CACHE_MIB": "0"}))
            shutil.rmtree(os.path.join(work, "plans"), ignore_errors=True)
        for b in builds:
            first = rows[b]["cold"][0]
            if len(builds) > 1:
                print(b)
            print(f"{first['calls']:,} calls, {first['n']} allocators, medians of {a.reps} runs; "
                  f"plan {first['plan_total'] / 2**30:.2f} GiB, replayer bookkeeping at most "
                  f"{first['bookkeeping'] / 2**20:.1f} MiB")
            print(f"  {'':6} {'whole command':>14} {'replays':>9} {'ratio':>7} {'plan building':>14}  plans")
            for kind in ("cold", "warm", "unkept"):
                r = rows[b][kind]
                wall = statistics.median(x["wall"] for x in r)
                replays = statistics.median(x["replays"] for x in r)
                build = statistics.median(x["build"] for x in r)
                print(f"  {kind:6} {wall:12.2f} s {replays:7.2f} s {wall / replays:6.2f}x {build:12.2f} s  "
                      f"{', '.join(r[0]['sources'])}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
