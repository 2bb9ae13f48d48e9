#!/usr/bin/env python3
"""Replay fidelity for a program whose threads come and go (issue 16).

`churn THREADS OPS LIVE WAVES` starts THREADS threads at a time, WAVES times
over (each wave joined before the next starts). It is captured once under
glibc; then, once per allocator, interleaved --reps times:
  real     the program with the allocator preloaded: its peak anonymous RSS
           (RssAnon, sampled every millisecond), as scripts/bench-fidelity.py
  replay   `heaplab replay` as it replays by default: recorded threads that
           never ran at the same time run one after another, each on a
           thread of its own started once the one before has exited
           (plan.h, kStepNewThread)
  at once  the same with `--threads R` (R = the recorded threads): one replay
           thread per recorded thread, all started together (heaplab's
           default before)
Both replays with the settings experiments use for memory (--timing
recorded, --touch recorded, --sample-ms 1): the replay's heap peak.

Prints per allocator the medians of real, replay and at once, the ratios to
real, the replay threads each used, and their wall times; then the program's
peak anonymous RSS under capture (capture.anon_rss_peak_kib) against the
glibc replay's heap peak: the replay follows the run that was captured.

With --trace T.hlt, a trace captured before (by another build, say) is
replayed --reps times as it replays by default, on glibc, --no-memory, no
real runs: the whole command's wall time and the replay's, the replay threads
and the waits (the engine's back-off with many threads waiting).

Usage: scripts/bench-thread-waves.py [--reps 3] [--program "50 20 100 200"] [--trace T.hlt]
HEAPLAB_BUILD_DIR picks the build (default: build/).
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")
CHURN = os.path.join(BUILD, "capture", "testprogs", "churn")

# The real runs are measured as scripts/bench-fidelity.py measures them.
_spec = importlib.util.spec_from_file_location("bench_fidelity", os.path.join(REPO, "scripts", "bench-fidelity.py"))
fidelity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fidelity)


def replay(trace, allocator, out, extra):
    r = subprocess.run([HEAPLAB, "replay", trace, "-q", "--allocator", allocator, "--timing", "recorded",
                        "--touch", "recorded", "--sample-ms", "1", "-o", out] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench-thread-waves: replay of {trace} on {allocator} {' '.join(extra)} failed: {r.stderr.strip()}")
    j = json.load(open(out))
    return j["replay"]["memory"]["heap_peak_kib"], j["replay_threads"], j["replay"]["wall_s"]


def replay_only(trace, reps):
    with tempfile.TemporaryDirectory(prefix="heaplab-waves-") as work:
        env = dict(os.environ, HEAPLAB_PLAN_DIR=os.path.join(work, "plans"))
        out = os.path.join(work, "r.json")
        whole, walls = [], []
        for _ in range(reps):
            t0 = time.monotonic()
            r = subprocess.run([HEAPLAB, "replay", trace, "-q", "--no-memory", "-o", out], env=env,
                               capture_output=True, text=True)
            whole.append(time.monotonic() - t0)
            if r.returncode != 0:
                sys.exit(f"bench-thread-waves: replay of {trace} failed: {r.stderr.strip()}")
            j = json.load(open(out))
            walls.append(j["replay"]["wall_s"])
        w = j["replay"]["cross_thread_waits"]
        print(f"{trace}: {j['trace']['recorded_threads']:,} recorded threads on {j['replay_threads']} replay threads; "
              f"medians of {reps}: whole command {statistics.median(whole):.2f} s, replay {statistics.median(walls):.2f} s; "
              f"cross-thread waits {w['count']} ({w['total_ns'] / 1e9:.1f} s in all threads)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--program", default="50 20 100 200", help="churn's arguments: THREADS OPS LIVE WAVES")
    ap.add_argument("--trace", help="replay this trace only (no capture, no real runs)")
    a = ap.parse_args()
    for path in (HEAPLAB, CHURN):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench-thread-waves: {path} not found: build first (scripts/bootstrap.sh)")
    if a.trace:
        replay_only(a.trace, a.reps)
        return
    cmd = [CHURN] + a.program.split()
    libs = fidelity.allocator_libs()
    with tempfile.TemporaryDirectory(prefix="heaplab-waves-") as work:
        trace = os.path.join(work, "waves.hlt")
        os.environ["HEAPLAB_PLAN_DIR"] = os.path.join(work, "plans")  # (the replays' plans, not the user's)
        subprocess.run([HEAPLAB, "capture", "-q", "-o", trace, "--"] + cmd, check=True, stdout=subprocess.DEVNULL)
        stats = json.loads(subprocess.run([HEAPLAB, "stats", "--json", trace], check=True, capture_output=True,
                                          text=True).stdout)
        recorded = stats["threads"]
        meta = json.loads(subprocess.run([HEAPLAB, "cat", "--meta", trace], check=True, capture_output=True,
                                         text=True).stdout)
        captured_kib = meta.get("capture", {}).get("anon_rss_peak_kib", 0)
        rows = {}
        for alloc in libs:
            row = rows[alloc] = {"real": [], "replay": [], "at_once": [], "threads": (0, 0), "wall": ([], [])}
            for i in range(a.reps):
                e = dict(os.environ)
                if libs[alloc]:
                    e["LD_PRELOAD"] = libs[alloc]
                row["real"].append(fidelity.real_run(cmd, e, work, None)[0])
                peak, threads, wall = replay(trace, alloc, os.path.join(work, "r.json"), [])
                row["replay"].append(peak)
                row["wall"][0].append(wall)
                peak1, threads1, wall1 = replay(trace, alloc, os.path.join(work, "r1.json"), ["--threads", str(recorded)])
                row["at_once"].append(peak1)
                row["wall"][1].append(wall1)
                row["threads"] = (threads, threads1)
        print(f"churn {a.program}: {stats['events']:,} events, {recorded:,} recorded threads; "
              f"medians of {a.reps} (heap peaks in MiB)")
        print("| allocator | real | replay | replay/real | replay threads | at once | at once/real | replay threads "
              "| wall: replay, at once |")
        print("|---|---|---|---|---|---|---|---|---|")
        for alloc, row in rows.items():
            real = statistics.median(row["real"]) / 1024
            rep = statistics.median(row["replay"]) / 1024
            one = statistics.median(row["at_once"]) / 1024
            w0, w1 = statistics.median(row["wall"][0]), statistics.median(row["wall"][1])
            print(f"| {alloc} | {real:.1f} | {rep:.1f} | **{rep / real:.2f}x** | {row['threads'][0]} | {one:.1f} | "
                  f"{one / real:.2f}x | {row['threads'][1]} | {w0:.2f} s, {w1:.2f} s |")
        # The replay follows the run that was captured: where the capture's
        # slowing let more of the program's threads overlap than natively
        # (more arenas, more heap), its heap is the captured run's.
        if captured_kib and "glibc" in rows:
            rep = statistics.median(rows["glibc"]["replay"]) / 1024
            print(f"the program under capture (glibc, one run): peak anonymous RSS {captured_kib / 1024:.1f} MiB "
                  f"(the trace's heap and the shim's own); the glibc replay's heap peak {rep:.1f} MiB, "
                  f"**{rep / (captured_kib / 1024):.2f}x** the captured run's")


if __name__ == "__main__":
    main()
