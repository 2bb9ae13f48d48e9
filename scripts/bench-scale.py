#!/usr/bin/env python3
"""heaplab on a production-size trace (issue 16): a program is captured with
about --calls heap calls, then the trace goes through `heaplab stats`, `heaplab check` and
`heaplab replay --allocator all`. Each stage's wall time and peak RSS (the
stage's whole process tree, from wait4) go into a table, with the trace's
and the plan's size, the scratch disk the capture used at most, and per
allocator the replay's own wall time, the replayer's peak RSS and its
bookkeeping (plan windows mapped, object table, the rest).

The program (--program):
  churn  capture/testprogs/churn with 2 threads (the default)
  redis  Debian's redis-server (main and I/O thread) under redis-benchmark,
         scripts/redis-workload.sh with as many requests as make about N calls;
         the capture stage's wall time then includes the benchmark driving it,
         and its peak RSS is the largest process of the tree (the server, the
         benchmark or heaplab)

Usage: scripts/bench-scale.py [--calls N] [--program churn|redis] [--dir DIR] [--keep]
DIR (default: a new directory under /var/tmp) must have room for the
trace, the capture's scratch files and the plan (about 30 bytes a call; the plan's file is
sparse, sized for 48).
Needs a build (scripts/bootstrap.sh).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")
CHURN = os.path.join(BUILD, "capture", "testprogs", "churn")
CALLS_PER_OP = 8.02  # churn 2 N makes about 8 heap calls per N (16,039,970 for N = 2,000,000)
REDIS = os.path.join(REPO, "scripts", "redis-workload.sh")
# redis-workload.sh R makes about 18.25 heap calls per request, 8 tests of R
# requests each (996,436,524 for R = 6,824,324; 14,818,057 for R = 100,000).
CALLS_PER_REDIS_REQUEST = 18.25 * 8


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def stage(name, argv, env=None, watch=None):
    """Runs argv; returns (wall s, peak RSS MiB of its process tree, exit code, largest size of `watch`)."""
    peak_disk = [0]
    stop = threading.Event()

    def poll():
        while not stop.wait(0.5):
            peak_disk[0] = max(peak_disk[0], du(watch))

    # (stderr into a file, not a pipe read after the wait: a child that
    # wrote more than a pipe holds would wait for ever.)
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as errf:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=errf)
        th = threading.Thread(target=poll) if watch else None
        if th:
            th.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        if th:
            stop.set()
            th.join()
        errf.seek(0)
        err = errf.read()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        print(f"bench-scale: {name} exited {code}: {err.strip()}", file=sys.stderr)
    return wall, ru.ru_maxrss / 1024, code, peak_disk[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=float, default=1e9)
    ap.add_argument("--program", choices=["churn", "redis"], default="churn")
    ap.add_argument("--dir", default="")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    for tool in (HEAPLAB, CHURN):
        if not os.access(tool, os.X_OK):
            sys.exit(f"bench-scale: {tool} not found (build it first: scripts/bootstrap.sh)")
    work = a.dir or tempfile.mkdtemp(prefix="heaplab-scale-", dir="/var/tmp")
    os.makedirs(work, exist_ok=True)
    trace = os.path.join(work, a.program + ".hlt")
    plans = os.path.join(work, "plans")
    env = dict(os.environ, HEAPLAB_PLAN_DIR=plans, HEAPLAB=HEAPLAB)
    if a.program == "churn":
        ops = int(a.calls / CALLS_PER_OP)
        program = f"churn 2 {ops:,}"
        capture = [HEAPLAB, "capture", "-q", "-o", trace, "--", CHURN, "2", str(ops)]
    else:
        requests = max(1, int(a.calls / CALLS_PER_REDIS_REQUEST))
        program = f"redis-server under redis-benchmark, {requests:,} requests per test"
        capture = ["bash", REDIS, trace, str(requests)]
    rows = []
    try:
        w, rss, code, disk = stage("capture", capture, env, watch=work)
        if code != 0:
            sys.exit(1)
        rows.append(("capture (program + normalising)", w, rss, f"disk at most {disk / 2**30:.1f} GiB (raw scratch files + trace)"))
        w, rss, code, _ = stage("stats", [HEAPLAB, "stats", trace, "--json"], env)
        rows.append(("stats", w, rss, ""))
        w, rss, code, _ = stage("check", [HEAPLAB, "check", trace], env)
        rows.append(("check", w, rss, "exit " + str(code)))
        out = os.path.join(work, "all.json")
        w, rss, code, _ = stage("replay", [HEAPLAB, "replay", trace, "-q", "--allocator", "all", "-o", out], env)
        results = json.load(open(out)) if os.path.exists(out) else []
        calls = results[0]["trace"]["calls"] if results else 0
        plan_total = results[0]["replay"]["bookkeeping_bytes"]["plan_total"] if results else 0
        build = sum(x.get("plan_build_s", 0) for x in results)
        rows.append(("replay --allocator all", w, rss, f"plan built once in {build:.0f} s, "
                     f"{plan_total / 2**30:.1f} GiB on disk"))
        print(f"{calls:,} calls ({program}); trace {os.path.getsize(trace) / 2**30:.2f} GiB "
              f"({os.path.getsize(trace) / max(calls, 1):.2f} bytes a call)")
        print(f"| stage | wall | peak RSS | |")
        print(f"|---|---|---|---|")
        for name, w, rss, note in rows:
            print(f"| {name} | {w:.1f} s | {rss:.0f} MiB | {note} |")
        print()
        print("| allocator | replay wall | replayer peak RSS | bookkeeping: total (plan windows, table, rest) | faithful |")
        print("|---|---|---|---|---|")
        for x in results:
            r = x.get("replay", {})
            b = r.get("bookkeeping_bytes", {})
            mib = lambda v: v / 2**20
            print(f"| {x['allocator']['name']} | {r.get('wall_s', 0):.1f} s | {r.get('max_rss_kib', 0) / 1024:.0f} MiB | "
                  f"{mib(b.get('total', 0)):.0f} MiB ({mib(b.get('plan', 0)):.0f}, {mib(b.get('object_table', 0)):.1f}, "
                  f"{mib(b.get('other', 0)):.1f}) | {r.get('faithful')} |")
    finally:
        if not a.keep and not a.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
