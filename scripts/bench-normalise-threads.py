#!/usr/bin/env python3
"""The normaliser's memory for a program with many threads (issue 16):
`churn THREADS OPS` is captured once with its raw files kept, then the raw
file is normalised again on its own (`heaplab import --from heaplab-raw`)
--reps times; the peak RSS of that process (wait4), its wall time and the
trace's size are printed, with the trace's peak of live objects (the
normaliser keeps one entry per live object, whatever it does per thread).

Usage: scripts/bench-normalise-threads.py [--threads 512] [--ops 2000] [--reps 3]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
import glob
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=512)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="heaplab-norm-threads-")
    try:
        raw = os.path.join(work, "raw")
        trace = os.path.join(work, "churn.hlt")
        churn = os.path.join(BUILD, "capture", "testprogs", "churn")
        subprocess.run([HEAPLAB, "capture", "-q", "--keep-raw", "--raw-dir", raw, "-o", trace, "--", churn,
                        str(a.threads), str(a.ops)], check=True, stdout=subprocess.DEVNULL)
        raws = glob.glob(os.path.join(raw, "*.hlraw"))
        if len(raws) != 1:
            sys.exit(f"bench-normalise-threads: expected one raw file, found {len(raws)}")
        rss, wall = [], []
        out = os.path.join(work, "again.hlt")
        for _ in range(a.reps):
            t0 = time.monotonic()
            p = subprocess.Popen([HEAPLAB, "import", "--from", "heaplab-raw", "-o", out, raws[0]],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            _, status, ru = os.wait4(p.pid, 0)
            wall.append(time.monotonic() - t0)
            if os.waitstatus_to_exitcode(status) != 0:
                sys.exit("bench-normalise-threads: the normaliser failed")
            rss.append(ru.ru_maxrss / 1024)
        stats = subprocess.run([HEAPLAB, "stats", out], capture_output=True, text=True).stdout
        live = next((line for line in stats.splitlines() if line.startswith("peak live objects")), "")
        events = next((line for line in stats.splitlines() if line.startswith("events:")), "")
        print(f"churn {a.threads} {a.ops}: {events}; {live}")
        print(f"  normaliser peak RSS {statistics.median(rss):.0f} MiB, wall {statistics.median(wall):.2f} s "
              f"(medians of {a.reps}); trace {os.path.getsize(out) / 2**20:.2f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
