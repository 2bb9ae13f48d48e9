#!/usr/bin/env python3
"""Whole `heaplab capture` against the program run natively (issue 16):
normalising while the program runs (`--normalise live`, the default) and
once it has exited (`--normalise after`), with the scratch disk each needs,
and the program's own wall time within each (start to exit, from heaplab
capture's summary): what the shim costs it, apart from normalising.

For each program (`churn 1 4000000` leaves a core free, `churn 2 2000000`
keeps both busy, `churn 512 4000` has 512 threads, `churn 300 300 20000 24`
runs 7,200 threads, 300 at a time: threads that come and go), runs are
interleaved (native, live, after, native, ...)
--reps times; medians of the wall times are printed, start to finish of each
command. While a capture runs, a sampler reads the disk space its raw
directory holds (allocated blocks, so punched holes do not count) and
heaplab's own peak RSS (VmHWM) every 2 ms.

Then one long capture (`churn 2 --long-ops`, 16 M calls per million ops)
shows scratch disk staying bounded whatever the length.

With --compare BUILD_DIR, live captures by this build and by that one are
interleaved with the native runs instead, each build first in turn (no `after`
runs, no long run), and
each build's median wall time and CPU time (heaplab and the program, user +
system) are printed: the CPU time moves less with the machine's noise; and
the largest scratch disk and heaplab RSS of its runs, and the median of its
runs' medians of heaplab's anonymous memory (RssAnon) while it runs. The program is this
build's churn for both.
--programs picks the programs to run (default: 1,2,512; also waves, and 10k
and 100k: `churn 50 20 100 200` and `2000`, 10,000 and 100,000 threads of
about 136 calls each, 50 at a time: heaplab's RSS between the two is what
each thread that has gone still costs it; and idle: `churn 2 2000000 20000 1 500`, two
churning threads beside 500 that made 100 strings each and then wait: what
idle threads cost heaplab).

Usage: scripts/bench-capture-live.py [--reps 5] [--long-ops 20000000] [--skip-long]
           [--programs 1,2,512] [--compare BUILD_DIR]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")
CHURN = os.path.join(BUILD, "capture", "testprogs", "churn")


def dir_bytes(path):
    total = 0
    try:
        with os.scandir(path) as it:
            for e in it:
                try:
                    total += e.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    pass
    except OSError:
        pass
    return total


def rss_kib(pid):
    """(VmHWM, RssAnon) of pid in KiB, 0 where unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            text = f.read()
    except OSError:
        return 0, 0
    hwm = re.search(r"VmHWM:\s+(\d+)", text)
    now = re.search(r"RssAnon:\s+(\d+)", text)
    return int(hwm.group(1)) if hwm else 0, int(now.group(1)) if now else 0


PROGRAMS = {"1": ["1", "4000000"], "2": ["2", "2000000"], "512": ["512", "4000"],
            "waves": ["300", "300", "20000", "24"], "10k": ["50", "20", "100", "200"],
            "100k": ["50", "20", "100", "2000"], "idle": ["2", "2000000", "20000", "1", "500"]}


def run_capture(work, prog, mode, heaplab=HEAPLAB, cpu=None, anon=None):
    """Returns (wall seconds, peak scratch bytes, heaplab peak RSS KiB, stderr);
    appends the CPU seconds of heaplab and its children to `cpu` if given,
    and the median of heaplab's anonymous memory (RssAnon, KiB) over the
    run's samples to `anon` (what it holds while the program runs: not the
    shim's mapping's pages, which are the program's buffers, nor a moment's
    burst)."""
    out = os.path.join(work, "t.hlt")
    raw = os.path.join(work, "raw")
    shutil.rmtree(raw, ignore_errors=True)
    cmd = [heaplab, "capture", "--normalise", mode, "--raw-dir", raw, "-o", out, "--"] + prog
    peak = {"disk": 0, "rss": 0}
    samples = []  # RssAnon KiB
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak["disk"] = max(peak["disk"], dir_bytes(raw))
            hwm, now = rss_kib(p.pid)
            peak["rss"] = max(peak["rss"], hwm)
            if now:
                samples.append(now)
            time.sleep(0.002)

    th = threading.Thread(target=sample)
    th.start()
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.monotonic() - t0
    done.set()
    th.join()
    if cpu is not None:
        cpu.append(ru.ru_utime + ru.ru_stime)
    if anon is not None:
        anon.append(statistics.median(samples) if samples else 0)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {p.returncode}: {err.strip()[-500:]}")
    return dt, peak["disk"], peak["rss"], err


def program_seconds(err):
    """The program's own wall time under the shim, from start to exit, as
    heaplab capture's summary gives it (`PROG exited with status N after S s`):
    what the shim costs the program, apart from normalising."""
    m = re.search(r"exited with status [0-9]+ after ([0-9.]+) s", err)
    if not m:
        sys.exit(f"bench: heaplab capture's summary gave no program time: {err.strip()[-300:]}")
    return float(m.group(1))


def timed(cmd):
    t0 = time.monotonic()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {r.returncode}")
    return time.monotonic() - t0


def mib(n):
    return f"{n / 1048576:.1f} MiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--long-ops", type=int, default=20000000)
    ap.add_argument("--skip-long", action="store_true")
    ap.add_argument("--programs", default="1,2,512",
                    help="churn programs to run: 1, 2, 512, waves, 10k, 100k, idle")
    ap.add_argument("--compare", help="another build directory: its live captures interleaved with this build's")
    a = ap.parse_args()
    programs = []
    for name in a.programs.split(","):
        if name not in PROGRAMS:
            sys.exit(f"bench: --programs: {name!r} is not one of {', '.join(PROGRAMS)}")
        programs.append(PROGRAMS[name])
    if a.compare and os.path.realpath(a.compare) == os.path.realpath(BUILD):
        sys.exit(f"bench: --compare {a.compare} is the build measured already")
    other = os.path.join(a.compare, "cli", "heaplab") if a.compare else None
    for p in (HEAPLAB, CHURN) + ((other,) if other else ()):
        if not os.path.exists(p):
            sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    work = tempfile.mkdtemp(prefix="heaplab-bench-live-")
    try:
        if other:
            compare(work, programs, other, a.compare, a.reps)
            return
        print("| program | native | capture, live | vs native | the program in it | capture, after | vs native "
              "| the program in it | scratch peak, live | scratch peak, after | heaplab RSS, live |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for prog in programs:
            cmdline = [CHURN] + prog
            nat, live, after, disk_live, disk_after, rss_live = [], [], [], [], [], []
            prog_live, prog_after = [], []
            for _ in range(a.reps):
                nat.append(timed(cmdline))
                dt, disk, rss, err = run_capture(work, cmdline, "live")
                live.append(dt)
                prog_live.append(program_seconds(err))
                disk_live.append(disk)
                rss_live.append(rss)
                dt, disk, _, err = run_capture(work, cmdline, "after")
                after.append(dt)
                prog_after.append(program_seconds(err))
                disk_after.append(disk)
            n, l, f = statistics.median(nat), statistics.median(live), statistics.median(after)
            pl, pf = statistics.median(prog_live), statistics.median(prog_after)
            print(f"| `churn {' '.join(prog)}` | {n:.3f} s | {l:.3f} s | **{l / n:.2f}x** | {pl:.3f} s ({pl / n:.2f}x) "
                  f"| {f:.3f} s | {f / n:.2f}x | {pf:.3f} s ({pf / n:.2f}x) "
                  f"| {mib(max(disk_live))} | {mib(max(disk_after))} | {max(rss_live) / 1024:.1f} MiB |",
                  flush=True)
        if not a.skip_long:
            prog = [CHURN, "2", str(a.long_ops)]
            dt, disk, rss, err = run_capture(work, prog, "live")
            m = re.search(r": ([0-9,]+) calls in", err)
            calls = m.group(1) if m else "?"
            print(f"\nlong: `churn 2 {a.long_ops}` ({calls} calls) captured live in {dt:.1f} s: "
                  f"scratch disk peak {mib(disk)}, heaplab peak RSS {rss / 1024:.1f} MiB "
                  f"(after the fact it would need {int(calls.replace(',', '')) * 32 / 1073741824:.1f} GiB of scratch)"
                  if calls != "?" else f"long: {err}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare(work, programs, other, other_dir, reps):
    builds = [(BUILD, HEAPLAB), (other_dir, other)]
    print(f"live captures, medians of {reps}, runs interleaved (native, then both builds, each first in turn)")
    print("| program | native | build | capture, live | vs native | CPU (heaplab + program) "
          "| scratch peak | heaplab RSS | heaplab RssAnon, median |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prog in programs:
        cmdline = [CHURN] + prog
        nat = []
        wall = {b: [] for b, _ in builds}
        cpu = {b: [] for b, _ in builds}
        disk = {b: 0 for b, _ in builds}
        rss = {b: 0 for b, _ in builds}
        anon = {b: [] for b, _ in builds}
        for i in range(reps):
            nat.append(timed(cmdline))
            # Each build first in turn: the run right after the native one
            # came out about 10% slower (`churn 1`, either build first).
            for b, exe in builds if i % 2 == 0 else builds[::-1]:
                dt, d, r, _ = run_capture(work, cmdline, "live", exe, cpu[b], anon[b])
                wall[b].append(dt)
                disk[b] = max(disk[b], d)
                rss[b] = max(rss[b], r)
        n = statistics.median(nat)
        for b, _ in builds:
            w = statistics.median(wall[b])
            print(f"| `churn {' '.join(prog)}` | {n:.3f} s | {b} | {w:.3f} s | **{w / n:.2f}x** "
                  f"| {statistics.median(cpu[b]):.2f} s | {mib(disk[b])} | {rss[b] / 1024:.1f} MiB "
                  f"| {statistics.median(anon[b]) / 1024:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()
