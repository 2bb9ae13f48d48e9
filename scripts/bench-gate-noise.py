#!/usr/bin/env python3
"""What `heaplab gate` fails with nothing changed: one build replays one
trace in --sessions sessions of the same experiment (the allocators,
--reps repetitions and a warm-up each, as a CI job's), and every session
after the first is gated against the first with the default budgets (or
--budget ...; the latency percentiles have none by default: give
--budget malloc_p99_ns=+100% to see theirs). Each failure is a false alarm. Prints, per metric over all
allocators and comparisons: the checks, the false failures, and the
largest and the median absolute change between sessions.

With --within, each session replays two labels of one allocator, and
each session's second is gated against its first (as the README's CI job
gates a pull request's build against the target branch's).

Usage: scripts/bench-gate-noise.py --trace T.hlt [--sessions 6] [--reps 5] [--within]
           [--allocators glibc,jemalloc,mimalloc,tcmalloc] [--timing recorded|fast]
           [--budget METRIC=+N% ...]
HEAPLAB_BUILD_DIR picks the build (default: build/).
"""
import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
HEAPLAB = os.path.join(BUILD, "cli", "heaplab")
# A check's line: columns apart by two spaces or more (a figure and its unit
# by one): "ok  pass  sqlite3  glibc  wall_s  0.0393 s  0.0393 s  -0.1%  +5%  0.310"
COLUMNS = re.compile(r"\s{2,}")


def fail(msg):
    sys.exit(f"bench-gate-noise: {msg}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trace", required=True)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--allocators", default="glibc,jemalloc,mimalloc,tcmalloc")
    ap.add_argument("--timing", default="recorded", choices=["recorded", "fast"])
    ap.add_argument("--budget", action="append", default=[], help="as heaplab gate's (default: its defaults)")
    ap.add_argument("--within", action="store_true",
                    help="two labels of the first allocator in each session, one gated against the other "
                         "(as the README's CI job gates two builds interleaved in one session)")
    a = ap.parse_args()
    if a.sessions < 2:
        fail("--sessions: at least 2 (the first is the baseline)")
    if not os.access(HEAPLAB, os.X_OK):
        fail(f"{HEAPLAB} not found (build it first)")
    if not os.path.isfile(a.trace):
        fail(f"--trace {a.trace}: no such file")
    work = tempfile.mkdtemp(prefix="heaplab-gate-noise-")
    try:
        yaml = os.path.join(work, "aa.yaml")
        with open(yaml, "w") as f:
            first = a.allocators.split(",")[0]
            allocators = f"[{{name: {first}, label: a}}, {{name: {first}, label: b}}]" if a.within else \
                f"[{a.allocators}]"
            f.write(f"name: aa\ntraces:\n  - name: t\n    file: {os.path.abspath(a.trace)}\n"
                    f"allocators: {allocators}\nreplay: {{latency: 16, timing: {a.timing}}}\n"
                    f"repetitions: {a.reps}\nwarmup: 1\n")
        results = os.path.join(work, "results")
        for k in range(a.sessions):
            r = subprocess.run([HEAPLAB, "run", yaml, "--results", results, "--session", f"s{k}", "--quiet"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                fail(f"session s{k}: heaplab run failed (exit {r.returncode}): {r.stderr.strip()[-400:]}")
        checks = collections.Counter()
        failures = collections.Counter()
        not_run = collections.Counter()  # a run failed, or its figure is missing (not a false alarm)
        changes = collections.defaultdict(list)
        budgets = {}
        gates_failed = 0
        for k in range(0 if a.within else 1, a.sessions):
            cmd = [HEAPLAB, "gate", "--results", results, "--session", f"s{k}"] + \
                (["--allocator", "b", "--baseline-allocator", "a"] if a.within else ["--baseline", "s0"])
            for b in a.budget:
                cmd += ["--budget", b]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode not in (0, 1):
                fail(f"heaplab gate failed (exit {r.returncode}): {r.stderr.strip()}")
            gates_failed += r.returncode == 1
            for line in r.stdout.splitlines():
                if line.startswith("budgets: "):
                    judged = re.sub(r" \(not [^)]*\)", "", line[len("budgets: "):].split(";")[0])
                    for part in judged.split(", "):
                        name, _, budget = part.partition(" ")
                        budgets[name] = budget
                f = COLUMNS.split(line.strip())
                if len(f) < 9 or f[0] not in ("ok", "FAIL") or f[4] not in budgets:
                    continue
                state, metric, change = f[1], f[4], f[7]
                checks[metric] += 1
                failures[metric] += state == "regression"
                not_run[metric] += state in ("failed", "missing")
                if change.endswith("%"):
                    changes[metric].append(abs(float(change[:-1])))
        gates = a.sessions if a.within else a.sessions - 1
        what = (f"in each, one label of {a.allocators.split(',')[0]} gated against the other" if a.within else
                f"sessions 2..{a.sessions} gated against the first")
        print(f"{os.path.basename(a.trace)}: {a.sessions} sessions of "
              f"{2 if a.within else a.allocators.count(',') + 1} allocators x {a.reps} repetitions ({a.timing} "
              f"timing), {what}: {gates_failed} of {gates} gates failed with nothing changed")
        print("| metric | budget | checks | false failures | failed or missing | largest change | median change |")
        print("|---|---|---|---|---|---|---|")
        for metric in budgets:
            if not checks[metric]:
                continue
            c = changes[metric]
            largest = f"{max(c):.1f}%" if c else "-"
            median = f"{statistics.median(c):.1f}%" if c else "-"
            print(f"| {metric} | {budgets[metric]} | {checks[metric]} | {failures[metric]} | {not_run[metric]} | "
                  f"{largest} | {median} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
