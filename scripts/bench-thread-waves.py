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
glibc replay's heap peak: the replay follows the run that was captured; and
the glibc arenas the program made, natively and under capture (a preload
compiled with the system's C compiler writes malloc_info's count at exit).

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
import shutil
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


# A preload that writes, as its process exits, its name and the glibc arenas
# it made (malloc_info's heaps): how many of a program's threads were alive
# at once, natively and under capture (arenas are made for threads that
# find every arena taken, up to 8 a core, and never freed).
ARENAS_C = r"""
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
__attribute__((destructor)) static void report(void) {
  char *buf = NULL, name[64] = "?";
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n), *c = fopen("/proc/self/comm", "r");
  if (!f) return;
  malloc_info(0, f);
  fclose(f);
  int heaps = 0;
  for (char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; ++p) ++heaps;
  if (c) {
    if (fgets(name, sizeof name, c)) name[strcspn(name, "\n")] = 0;
    fclose(c);
  }
  FILE *o = fopen(getenv("HEAPLAB_ARENAS_OUT"), "a");
  if (o) {
    fprintf(o, "%s %d\n", name, heaps);
    fclose(o);
  }
  free(buf);
}
"""


def arenas(work, cmd, reps):
    """Medians of glibc's arenas at exit (main included): the program run
    natively, and under capture (None where no C compiler is found)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    src, lib = os.path.join(work, "arenas.c"), os.path.join(work, "arenas.so")
    with open(src, "w") as f:
        f.write(ARENAS_C)
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", lib, src], check=True)
    out = {}
    for kind in ("native", "captured"):
        counts = []
        for i in range(reps):
            path = os.path.join(work, f"arenas-{kind}-{i}.txt")
            env = dict(os.environ, LD_PRELOAD=lib, HEAPLAB_ARENAS_OUT=path)
            run = cmd if kind == "native" else [HEAPLAB, "capture", "-q", "-o", os.path.join(work, "arenas.hlt"), "--"] + cmd
            subprocess.run(run, env=env, check=True, stdout=subprocess.DEVNULL)
            with open(path) as f:
                counts += [int(n) for name, n in (line.split() for line in f) if name == os.path.basename(cmd[0])]
        out[kind] = statistics.median(counts)
    return out


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
        counted = arenas(work, cmd, a.reps)
        if counted is not None:
            print(f"glibc arenas at exit (main included), medians of {a.reps}: {counted['native']:g} natively, "
                  f"{counted['captured']:g} under capture")


if __name__ == "__main__":
    main()
