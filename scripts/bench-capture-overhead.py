#!/usr/bin/env python3
"""Capture overhead, side by side in one run: the same allocation-heavy
2-thread program (capture/testprogs/churn: std::map<std::string,std::string>
churn) run natively, under `heaplab capture`, and under heaptrack (the tool
users would otherwise use). Runs are interleaved (native, heaplab, heaptrack,
native, ...) so machine noise hits all three alike; medians are reported.

Usage: scripts/bench-capture-overhead.py [--reps N] [--threads T] [--ops N]
Needs a build (scripts/bootstrap.sh) and heaptrack (Debian package).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))


def timed(cmd, **kw):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-500:]}")
    return dt, r


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
    have_heaptrack = shutil.which("heaptrack") is not None
    prog = [churn, str(a.threads), str(a.ops)]
    work = tempfile.mkdtemp(prefix="heaplab-bench-")
    native, total, under, norm, ht = [], [], [], [], []
    calls = nbytes = 0
    for rep in range(a.reps):
        native.append(timed(prog)[0])
        out = os.path.join(work, "churn.hlt")
        dt, r = timed([heaplab, "capture", "-o", out, "--"] + prog)
        total.append(dt)
        m = re.search(r"exited with status 0 after ([0-9.]+) s", r.stderr)
        under.append(float(m.group(1)))
        norm.append(float(re.search(r"normalised in ([0-9.]+) s", r.stderr).group(1)))
        m = re.search(r": ([0-9,]+) calls in .* ([0-9,]+) bytes = ", r.stderr)
        calls, nbytes = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
        if have_heaptrack:
            ht.append(timed(["heaptrack", "-o", os.path.join(work, "ht")] + prog)[0])
            for f in os.listdir(work):
                if f.startswith("ht"):
                    os.remove(os.path.join(work, f))
        print(f"rep {rep + 1}/{a.reps}: native {native[-1]:.3f} s, heaplab {total[-1]:.3f} s "
              f"(program {under[-1]:.3f} s + normalise {norm[-1]:.3f} s)"
              + (f", heaptrack {ht[-1]:.3f} s" if ht else ""), flush=True)
    shutil.rmtree(work, ignore_errors=True)
    med = statistics.median
    n = med(native)
    print()
    print(f"churn {a.threads} threads x {a.ops:,} ops: {calls:,} heap calls; medians of {a.reps} interleaved runs")
    print(f"  native                               {n:7.3f} s   1.00x")
    print(f"  program under heaplab capture        {med(under):7.3f} s   {med(under) / n:.2f}x   "
          f"(+{(med(under) - n) * 1e9 / calls * a.threads:.1f} ns per call per thread)")
    print(f"  heaplab capture, incl. normalising   {med(total):7.3f} s   {med(total) / n:.2f}x   "
          f"(normalise {med(norm):.3f} s = {calls / med(norm) / 1e6:.1f} M calls/s)")
    if ht:
        print(f"  heaptrack                            {med(ht):7.3f} s   {med(ht) / n:.2f}x")
    print(f"  trace size: {nbytes:,} bytes = {nbytes / calls:.2f} bytes per call")


if __name__ == "__main__":
    main()
