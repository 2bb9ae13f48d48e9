#!/usr/bin/env python3
"""The trace's timeline against the program's: how the normaliser takes the
shim's cost off the times. A real server (redis-server under
redis-benchmark, scripts/redis-workload.sh; skipped where it is not
installed) and `churn THREADS OPS` are captured once each with their raw
files kept, then each raw file is normalised (`heaplab import --from
heaplab-raw`) by this build and, with --compare, by another, and for each
trace this prints:

  - per thread, the share of its events stamped at the same time as its
    previous event (a timeline held still: none of a thread's calls take
    0 ns);
  - the share of freed objects that lived 0 ns;
  - the trace's duration against the program's run as captured less the
    shim's cost (capture.captured_duration_ns - capture.shim_cost_ns);
  - the trace's size in bytes an event.

Usage: scripts/bench-timeline.py [--requests 20000] [--threads 2] [--ops 2000000]
           [--compare BUILD_DIR] [--no-redis]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
import collections
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def fail(msg):
    sys.exit(f"bench-timeline: {msg}")


def one_raw(rawdir, what):
    raws = sorted(glob.glob(os.path.join(rawdir, "*.hlraw")))
    if not raws:
        fail(f"{what}: no raw file was kept in {rawdir}")
    # (redis-server's own image; a workload's helpers are not captured.)
    return max(raws, key=lambda p: os.path.getsize(p + ".blocks") if os.path.exists(p + ".blocks") else 0)


def capture_churn(work, threads, ops):
    rawdir = os.path.join(work, "churn.raw")
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    subprocess.run([heaplab(BUILD), "capture", "-q", "--keep-raw", "--raw-dir", rawdir, "-o",
                    os.path.join(work, "churn.hlt"), "--", churn, str(threads), str(ops)],
                   check=True, stdout=subprocess.DEVNULL)
    return one_raw(rawdir, "churn")


def capture_redis(work, requests):
    """scripts/redis-workload.sh with --keep-raw added to its capture."""
    rawdir = os.path.join(work, "redis.raw")
    wrapper = os.path.join(work, "heaplab-keep-raw")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n"
                f'if [ "$1" = capture ]; then shift; exec "{heaplab(BUILD)}" capture --keep-raw --raw-dir "{rawdir}" "$@"; fi\n'
                f'exec "{heaplab(BUILD)}" "$@"\n')
    os.chmod(wrapper, 0o755)
    env = dict(os.environ, HEAPLAB=wrapper)
    p = subprocess.run([os.path.join(REPO, "scripts", "redis-workload.sh"), os.path.join(work, "redis.hlt"),
                        str(requests)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        fail(f"redis-workload.sh failed: {p.stderr.strip()[-500:]}")
    return one_raw(rawdir, "redis")


def timeline(build, trace):
    """Per thread (events, events at their previous event's time)."""
    held = collections.Counter()
    events = collections.Counter()
    last = {}
    p = subprocess.Popen([heaplab(build), "cat", trace], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        f = line.split(None, 3)
        if len(f) < 3 or not f[2].startswith("@"):
            continue
        t, th = int(f[2][1:]), f[1]
        events[th] += 1
        if last.get(th) == t:
            held[th] += 1
        last[th] = t
    if p.wait() != 0:
        fail(f"{build}: heaplab cat {trace} failed")
    return {th: (events[th], held[th]) for th in events}


def measure(build, raw, out):
    p = subprocess.run([heaplab(build), "import", "--from", "heaplab-raw", "-o", out, raw], capture_output=True,
                       text=True)
    if p.returncode != 0:
        fail(f"{build}: normalising {raw} failed: {p.stderr.strip()}")
    stats = json.loads(subprocess.run([heaplab(build), "stats", "--json", out], check=True, capture_output=True,
                                      text=True).stdout)
    meta = json.loads(subprocess.run([heaplab(build), "cat", "--meta", out], check=True, capture_output=True,
                                     text=True).stdout)["capture"]
    buckets = stats["lifetime_ns_histogram"]["buckets"]
    freed = sum(b["count"] for b in buckets)
    zero = sum(b["count"] for b in buckets if b["max"] == 0)
    return {
        "threads": timeline(build, out),
        "zero": zero / freed if freed else 0.0,
        "duration": stats["duration_ns"] / 1e9,
        "corrected": (meta["captured_duration_ns"] - meta["shim_cost_ns"]) / 1e9,
        "bytes_per_event": os.path.getsize(out) / stats["events"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000, help="redis-benchmark requests per test")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    ap.add_argument("--compare", help="another build directory, normalising the same raw files")
    ap.add_argument("--no-redis", action="store_true", help="churn only")
    a = ap.parse_args()
    if a.compare and os.path.realpath(a.compare) == os.path.realpath(BUILD):
        fail(f"--compare {a.compare} is the build measured already")
    builds = [BUILD] + ([a.compare] if a.compare else [])
    for b in builds:
        if not os.access(heaplab(b), os.X_OK):
            fail(f"{heaplab(b)} not found (build it first)")
    work = tempfile.mkdtemp(prefix="heaplab-timeline-")
    try:
        raws = []
        if not a.no_redis:
            if shutil.which("redis-server") and shutil.which("redis-benchmark"):
                raws.append((f"redis ({a.requests} requests a test)", capture_redis(work, a.requests)))
            else:
                print("redis-server or redis-benchmark not installed: redis skipped (scripts/bootstrap.sh installs them)")
        raws.append((f"churn {a.threads} {a.ops}", capture_churn(work, a.threads, a.ops)))
        for what, raw in raws:
            print(f"{what}:")
            for i, b in enumerate(builds):
                m = measure(b, raw, os.path.join(work, f"out{i}.hlt"))
                per = ", ".join(f"{th} {held / n:.1%} of {n:,}" for th, (n, held) in sorted(m["threads"].items())
                                if n > 100)
                print(f"  {b}: events at their thread's previous time: {per}; objects freed at 0 ns: {m['zero']:.1%}; "
                      f"duration {m['duration']:.3f} s (captured less the shim's cost: {m['corrected']:.3f} s); "
                      f"{m['bytes_per_event']:.2f} bytes an event")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
