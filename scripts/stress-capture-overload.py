#!/usr/bin/env python3
"""Live captures made while the machine is overloaded: are their traces whole
and in order?

Runs COPIES captures at once (`heaplab capture`, normalising live), ROUNDS
times over, of two programs whose threads hand addresses to each other:
`churn 300 300 20000 8` (2,400 threads that come and go, 300 at a time) and
`victim_cpp threads 2 2 400000` (4 threads, 800,000 calls each). With two
cores and several captures at once, each live reader is starved of CPU and
the programs' threads are preempted for tens of milliseconds. Every trace is
then checked (`heaplab check`: a free given the wrong object, for one), and
the records the live reader read after it had written later ones are counted
(the capture's own note, `late_records`; builds before it had none to give).

  scripts/stress-capture-overload.py [--copies 3] [--rounds 10] [--compare BUILD_DIR]

With --compare, the other build's rounds are interleaved with this one's.
Prints a Markdown table: captures, those that failed `check`, late records.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = [
    ("churn", ["300", "300", "20000", "8"]),
    ("victim_cpp", ["threads", "2", "2", "400000"]),
]
LATE = re.compile(r"([\d,]+) records read after later ones")


def run_round(build, copies, work, tally):
    heaplab = os.path.join(build, "cli", "heaplab")
    procs = []
    for name, args in PROGRAMS:
        prog = os.path.join(build, "capture", "testprogs", name)
        for c in range(copies):
            out = os.path.join(work, f"{name}-{c}.hlt")
            p = subprocess.Popen([heaplab, "capture", "-o", out, "--", prog] + args,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            procs.append((name, out, p))
    for name, out, p in procs:
        _, err = p.communicate()
        t = tally.setdefault(name, {"captures": 0, "failed": 0, "check": 0, "late": 0, "late_captures": 0})
        t["captures"] += 1
        if p.returncode != 0:
            t["failed"] += 1
            sys.stderr.write(f"{build}: capture of {name} exited {p.returncode}: {err.strip()[-300:]}\n")
            continue
        m = LATE.search(err)
        if m:
            t["late"] += int(m.group(1).replace(",", ""))
            t["late_captures"] += 1
        check = subprocess.run([heaplab, "check", out], capture_output=True, text=True)
        if check.returncode != 0:
            t["check"] += 1
            first = (check.stdout + check.stderr).strip().splitlines()[:2]
            sys.stderr.write(f"{build}: {name}: check: {' / '.join(first)}\n")
        os.remove(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--compare", help="another build directory, run in turn with this one")
    a = ap.parse_args()
    builds = [a.build] + ([a.compare] if a.compare else [])
    for b in builds:
        for name, _ in PROGRAMS:
            if not os.path.exists(os.path.join(b, "capture", "testprogs", name)):
                sys.exit(f"stress-capture-overload: {b}: no capture/testprogs/{name} (build it first)")
    tallies = {b: {} for b in builds}
    work = tempfile.mkdtemp(prefix="heaplab-overload-")
    try:
        for r in range(a.rounds):
            for b in builds if r % 2 == 0 else reversed(builds):
                run_round(b, a.copies, work, tallies[b])
            sys.stderr.write(f"round {r + 1} of {a.rounds} done\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{a.copies} captures of each program at once, {a.rounds} rounds, on {os.cpu_count()} CPUs")
    print("| build | program | captures | capture failed | `check` failed | late records (captures with any) |")
    print("|---|---|---|---|---|---|")
    for b in builds:
        for name, args in PROGRAMS:
            t = tallies[b].get(name, {})
            print(f"| {b} | `{name} {' '.join(args)}` | {t.get('captures', 0)} | {t.get('failed', 0)} | "
                  f"{t.get('check', 0)} | {t.get('late', 0)} ({t.get('late_captures', 0)}) |")


if __name__ == "__main__":
    main()
