#!/usr/bin/env python3
"""The trace's timeline against the program's: how the normaliser takes the
shim's cost off the times. A real server (redis-server under
redis-benchmark, scripts/redis-workload.sh; skipped where it is not
installed) and `churn THREADS OPS` are measured two ways:

  kept raw  captured once each with their raw files kept (the live
            normaliser reads them during the run but gives no block back,
            so threads never wait for it), then each raw file normalised
            (`heaplab import --from heaplab-raw`) by this build and, with
            --compare, by the other: the same records, two normalisers;
  live      captured as `heaplab capture` captures by default (normalised
            while the program runs; threads wait for the reader when it
            falls behind) by each build, its own shim and normaliser.

For each trace it prints:
  - per thread, the share of its calls stamped at the same time as its
    previous call (a timeline held still: no call takes 0 ns);
  - the share of freed objects that lived 0 ns;
  - the trace's duration against the program's run as captured less the
    shim's cost (capture.captured_duration_ns - capture.shim_cost_ns);
  - the trace's size in bytes an event;
and churn's native run (without capture, the median of 3), which a
duration on the native timeline should come near where the capture did not
slow the program in other ways (a live reader on a core the program needs).

Usage: scripts/bench-timeline.py [--requests 20000] [--threads 2] [--ops 2000000]
           [--compare BUILD_DIR] [--no-redis] [--no-live]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
import collections
import glob
import json
import os
import shlex
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


def fail(msg):
    sys.exit(f"bench-timeline: {msg}")


def one_raw(rawdir, what):
    """The raw file with the most records kept (redis-server's own image:
    a workload's helpers write raw files of their own only if captured)."""
    raws = sorted(glob.glob(os.path.join(rawdir, "*.hlraw")))
    if not raws:
        fail(f"{what}: no raw file was kept in {rawdir}")

    def size(p):
        return os.path.getsize(p) + (os.path.getsize(p + ".blocks") if os.path.exists(p + ".blocks") else 0)

    return max(raws, key=size)


def run(cmd, what, **kw):
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        fail(f"{what} failed (exit {p.returncode}): {p.stderr.strip()[-500:]}")


def capture_churn(build, work, name, threads, ops, keep_raw):
    """A capture of churn by `build`: (trace, raw file or None)."""
    rawdir = os.path.join(work, name + ".raw")
    out = os.path.join(work, name + ".hlt")
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    keep = ["--keep-raw", "--raw-dir", rawdir] if keep_raw else []
    run([heaplab(build), "capture", "-q"] + keep + ["-o", out, "--", churn, str(threads), str(ops)],
        f"{build}: capturing churn")
    return out, one_raw(rawdir, "churn") if keep_raw else None


def capture_redis(build, work, name, requests, keep_raw):
    """scripts/redis-workload.sh with `build`'s heaplab (and --keep-raw added
    to its capture): (trace, raw file or None)."""
    rawdir = os.path.join(work, name + ".raw")
    out = os.path.join(work, name + ".hlt")
    wrapper = os.path.join(work, name + "-heaplab")
    extra = f"--keep-raw --raw-dir {shlex.quote(rawdir)} " if keep_raw else ""
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n"
                f'if [ "$1" = capture ]; then shift; exec {shlex.quote(heaplab(build))} capture {extra}"$@"; fi\n'
                f'exec {shlex.quote(heaplab(build))} "$@"\n')
    os.chmod(wrapper, 0o755)
    run([os.path.join(REPO, "scripts", "redis-workload.sh"), out, str(requests)], f"{build}: redis-workload.sh",
        env=dict(os.environ, HEAPLAB=wrapper))
    return out, one_raw(rawdir, "redis") if keep_raw else None


def native_churn(threads, ops, reps=3):
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    walls = []
    for _ in range(reps):
        t0 = time.monotonic()
        run([churn, str(threads), str(ops)], "churn, natively")
        walls.append(time.monotonic() - t0)
    return statistics.median(walls)


CALLS_ONLY = ("thread_start", "thread_end", "lost")


def timeline(build, trace):
    """Per thread number: (calls, calls at the time of the thread's call before)."""
    held = collections.Counter()
    calls = collections.Counter()
    last = {}
    p = subprocess.Popen([heaplab(build), "cat", trace], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        f = line.split(None, 3)
        if len(f) < 4 or not f[2].startswith("@") or not f[1].startswith("t") or f[3].startswith(CALLS_ONLY):
            continue
        t, th = int(f[2][1:]), int(f[1][1:])
        calls[th] += 1
        if last.get(th) == t:
            held[th] += 1
        last[th] = t
    if p.wait() != 0:
        fail(f"{build}: heaplab cat {trace} failed")
    return {th: (calls[th], held[th]) for th in calls}


def figures(build, trace):
    def out(cmd):
        p = subprocess.run([heaplab(build)] + cmd + [trace], capture_output=True, text=True)
        if p.returncode != 0:
            fail(f"{build}: heaplab {' '.join(cmd)} {trace} failed: {p.stderr.strip()}")
        return json.loads(p.stdout)

    stats = out(["stats", "--json"])
    if not stats.get("has_time"):
        fail(f"{trace}: the trace has no times")
    meta = out(["cat", "--meta"]).get("capture", {})
    buckets = stats["lifetime_ns_histogram"]["buckets"]
    freed = sum(b["count"] for b in buckets)
    zero = sum(b["count"] for b in buckets if b["max"] == 0)
    return {
        "threads": timeline(build, trace),
        "zero": zero / freed if freed else 0.0,
        "duration": stats["duration_ns"] / 1e9,
        "corrected": (meta.get("captured_duration_ns", 0) - meta.get("shim_cost_ns", 0)) / 1e9,
        "bytes_per_event": os.path.getsize(trace) / stats["events"],
    }


def normalised(build, raw, out):
    run([heaplab(build), "import", "--from", "heaplab-raw", "-o", out, raw], f"{build}: normalising {raw}")
    return figures(build, out)


def show(build, m):
    per = ", ".join(f"t{th} {held / n:.1%} of {n:,}" for th, (n, held) in sorted(m["threads"].items()) if n > 100)
    print(f"    {build}: calls at their thread's call before's time: {per}; objects freed at 0 ns: {m['zero']:.1%}; "
          f"duration {m['duration']:.3f} s (captured less the shim's cost: {m['corrected']:.3f} s); "
          f"{m['bytes_per_event']:.2f} bytes an event")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000, help="redis-benchmark requests per test")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=2000000)
    ap.add_argument("--compare", help="another build directory, normalising the same raw files")
    ap.add_argument("--no-redis", action="store_true", help="churn only")
    ap.add_argument("--no-live", action="store_true", help="the kept raw files only")
    a = ap.parse_args()
    if a.compare and os.path.realpath(a.compare) == os.path.realpath(BUILD):
        fail(f"--compare {a.compare} is the build measured already")
    builds = [BUILD] + ([a.compare] if a.compare else [])
    for b in builds:
        if not os.access(heaplab(b), os.X_OK):
            fail(f"{heaplab(b)} not found (build it first)")
    redis = not a.no_redis and all(shutil.which(t) for t in ("redis-server", "redis-benchmark", "redis-cli"))
    if not a.no_redis and not redis:
        print("redis-server, redis-benchmark or redis-cli not installed: redis skipped (scripts/bootstrap.sh "
              "installs them)")
    work = tempfile.mkdtemp(prefix="heaplab-timeline-")
    try:
        programs = ([(f"redis ({a.requests:,} requests a test)", "redis")] if redis else []) + \
                   [(f"churn {a.threads} {a.ops} (natively {native_churn(a.threads, a.ops):.3f} s)", "churn")]
        for what, kind in programs:
            print(f"{what}:")
            capture = (lambda b, n, keep: capture_redis(b, work, n, a.requests, keep)) if kind == "redis" else \
                (lambda b, n, keep: capture_churn(b, work, n, a.threads, a.ops, keep))
            _, raw = capture(BUILD, kind + "-kept", True)
            print("  kept raw, normalised by each build:")
            for i, b in enumerate(builds):
                show(b, normalised(b, raw, os.path.join(work, f"{kind}-kept-{i}.hlt")))
            if not a.no_live:
                print("  live, each build's own capture:")
                for i, b in enumerate(builds):
                    trace, _ = capture(b, f"{kind}-live-{i}", False)
                    show(b, figures(b, trace))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
