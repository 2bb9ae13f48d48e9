#!/usr/bin/env python3
"""The normaliser's memory and CPU (issue 16): `churn THREADS OPS` is
captured once with its raw files kept (or --raw names a kept raw file), then
the raw file is normalised again on its own (`heaplab import --from
heaplab-raw`) --reps times; the peak RSS of that process (wait4), its wall
time, its CPU time (user + system, both of its threads) per record and the
trace's size are printed, with the trace's peak of live objects (the
normaliser keeps one entry per live object, whatever it does per thread).

With --compare BUILD_DIR, the same raw file is normalised by that build too,
the two builds' runs interleaved (a noisy machine moves both alike). With
--levels 3,1, each build normalises it at each zstd level (`--level`), all
runs interleaved: what a level costs in CPU and gains in size.

Usage: scripts/bench-normalise-threads.py [--threads 512] [--ops 2000] [--reps 3]
           [--raw FILE.hlraw] [--compare BUILD_DIR] [--levels 3,1]
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


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def normalise(build, raw, out, level=None):
    """One run: (wall s, CPU s, peak RSS MiB)."""
    t0 = time.monotonic()
    extra = ["--level", str(level)] if level else []
    p = subprocess.Popen([heaplab(build), "import", "--from", "heaplab-raw", "-o", out] + extra + [raw],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench-normalise-threads: {build}: the normaliser failed: {err.decode(errors='replace').strip()}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=512)
    ap.add_argument("--ops", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--raw", help="a kept .hlraw file to normalise (default: capture churn)")
    ap.add_argument("--compare", help="another build directory, measured on the same raw file")
    ap.add_argument("--levels", help="zstd levels to normalise at, comma-separated (default: the import default)")
    a = ap.parse_args()
    try:
        levels = [int(x) for x in a.levels.split(",")] if a.levels else [None]
    except ValueError:
        sys.exit(f"bench-normalise-threads: --levels: not a list of numbers: {a.levels!r}")
    if any(lv is not None and not 1 <= lv <= 22 for lv in levels):
        sys.exit(f"bench-normalise-threads: --levels: zstd levels are 1 to 22 (got {a.levels!r})")
    if a.compare and os.path.realpath(a.compare) == os.path.realpath(BUILD):
        sys.exit(f"bench-normalise-threads: --compare {a.compare} is the build measured already")
    work = tempfile.mkdtemp(prefix="heaplab-norm-threads-")
    try:
        raw = a.raw
        what = os.path.basename(raw) if raw else f"churn {a.threads} {a.ops}"
        if not raw:
            rawdir = os.path.join(work, "raw")
            churn = os.path.join(BUILD, "capture", "testprogs", "churn")
            subprocess.run([heaplab(BUILD), "capture", "-q", "--keep-raw", "--raw-dir", rawdir, "-o",
                            os.path.join(work, "churn.hlt"), "--", churn, str(a.threads), str(a.ops)],
                           check=True, stdout=subprocess.DEVNULL)
            raws = glob.glob(os.path.join(rawdir, "*.hlraw"))
            if len(raws) != 1:
                sys.exit(f"bench-normalise-threads: expected one raw file, found {len(raws)}")
            raw = raws[0]
        builds = [BUILD] + ([a.compare] if a.compare else [])
        configs = [(b, lv) for b in builds for lv in levels]
        runs = {c: [] for c in configs}
        for _ in range(a.reps):
            for i, c in enumerate(configs):
                runs[c].append(normalise(c[0], raw, os.path.join(work, f"again{i}.hlt"), c[1]))
        out = os.path.join(work, "again0.hlt")
        stats = subprocess.run([heaplab(BUILD), "stats", out], capture_output=True, text=True).stdout
        live = next((line for line in stats.splitlines() if line.startswith("peak live objects")), "")
        events = next((line for line in stats.splitlines() if line.startswith("events:")), "")
        n = int(events.split(":")[1].split()[0].replace(",", "")) if events else 0
        print(f"{what}: {events}; {live}")
        for i, c in enumerate(configs):
            b = c[0] + (f" (level {c[1]})" if c[1] else "")
            wall = statistics.median(r[0] for r in runs[c])
            cpu = statistics.median(r[1] for r in runs[c])
            rss = statistics.median(r[2] for r in runs[c])
            per = f", {cpu / n * 1e9:.0f} ns of CPU an event" if n else ""
            size = os.path.getsize(os.path.join(work, f"again{i}.hlt")) / 2**20
            print(f"  {b}: normaliser peak RSS {rss:.0f} MiB, wall {wall:.2f} s, CPU {cpu:.2f} s{per} "
                  f"(medians of {a.reps}); trace {size:.2f} MiB")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
