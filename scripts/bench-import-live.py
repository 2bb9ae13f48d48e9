#!/usr/bin/env python3
"""What `heaplab import` costs as the objects live at once grow (issue 16:
the importers count the trace's live heap and objects as plan building
counts them, by each object's id). Two glibc mtrace logs of --objects
blocks each: "many live" makes every block, then frees every one (all live
at once); "few live" makes and frees them in pairs. Each is imported
--reps times by this build (and by --compare BUILD_DIR, interleaved); the
median wall time and the median peak RSS of the import are printed.

Usage: scripts/bench-import-live.py [--objects 5000000] [--reps 3] [--compare BUILD_DIR]
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


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def write_log(path, n, pairs):
    """An mtrace log of n 16-byte blocks: made and freed in pairs, or all made, then all freed."""
    made = b"@ ./p:[0x401000] + 0x%x 0x10\n"
    freed = b"@ ./p:[0x401010] - 0x%x\n"
    with open(path, "wb") as f:
        f.write(b"= Start\n")
        for lo in range(0, n, 100_000):
            hi = min(n, lo + 100_000)
            if pairs:
                f.write(b"".join((made % 0x10000000) + (freed % 0x10000000) for _ in range(lo, hi)))
            else:
                f.write(b"".join(made % (0x10000000 + 16 * i) for i in range(lo, hi)))
        if not pairs:
            for lo in range(0, n, 100_000):
                hi = min(n, lo + 100_000)
                f.write(b"".join(freed % (0x10000000 + 16 * i) for i in range(lo, hi)))
        f.write(b"= End\n")


def import_once(build, log, out):
    """Wall seconds and peak RSS (bytes) of one import."""
    t0 = time.monotonic()
    # (stderr into a file, not a pipe read after the wait: a child that
    # wrote more than a pipe holds would wait for ever.)
    with tempfile.TemporaryFile() as errf:
        p = subprocess.Popen([heaplab(build), "import", "--from", "mtrace", log, "-o", out],
                             stdout=subprocess.DEVNULL, stderr=errf)
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        errf.seek(0)
        err = errf.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench-import-live: {build}: import failed: {err.strip()}")
    return wall, usage.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--objects", type=int, default=5_000_000, help="blocks in each log")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compare", help="another build directory, measured on the same logs")
    a = ap.parse_args()
    builds = [BUILD] + ([os.path.abspath(a.compare)] if a.compare else [])
    for b in builds:
        if not os.access(heaplab(b), os.X_OK):
            sys.exit(f"bench-import-live: {heaplab(b)} not found (build it first: scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-import-live-")
    try:
        logs = {"many live": os.path.join(work, "many.mtrace"), "few live": os.path.join(work, "few.mtrace")}
        write_log(logs["many live"], a.objects, pairs=False)
        write_log(logs["few live"], a.objects, pairs=True)
        out = os.path.join(work, "out.hlt")
        print(f"{a.objects:,} blocks a log ({2 * a.objects:,} calls), medians of {a.reps}")
        print("| log | " + " | ".join(f"{b}: wall, peak RSS" for b in builds) + " |")
        print("|---|" + "---|" * len(builds))
        for name, log in logs.items():
            runs = {b: [] for b in builds}
            for rep in range(a.reps):
                for b in builds if rep % 2 == 0 else builds[::-1]:
                    runs[b].append(import_once(b, log, out))
            cells = [f"{statistics.median(r[0] for r in runs[b]):.2f} s, "
                     f"{statistics.median(r[1] for r in runs[b]) / 2**20:.0f} MiB" for b in builds]
            print(f"| {name} | " + " | ".join(cells) + " |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
