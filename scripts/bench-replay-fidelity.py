#!/usr/bin/env python3
"""Replay fidelity for memory: does a replay use as much heap as the program
it was captured from? For each program, side by side on glibc:

  program  the program itself; a sampler reads its anonymous RSS
           (/proc/PID/status RssAnon) every millisecond: its peak
  replay   `heaplab replay` of its capture (timed at the recorded pace, so
           that the heap grows and shrinks over the same time; memory
           sampled every millisecond): the peak of the anonymous RSS less
           the replayer's own bookkeeping (object table, results, samples)

Both figures are anonymous memory: the program's also holds its stacks and
static data besides the heap, the replay's also the replayer's small
anonymous baseline. Medians of --reps runs, interleaved.

Usage: scripts/bench-replay-fidelity.py [--reps N]
Needs a build (scripts/bootstrap.sh) and sqlite3.
"""
import argparse
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

SQL = """CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<200000)
INSERT INTO t SELECT x, printf('name-%d-%s', x, hex(randomblob(16))), x*1.5 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name-1%';
"""


def rss_anon_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def program_peak(cmd, stdin=None):
    """Runs cmd, sampling its RssAnon every millisecond; returns the peak KiB."""
    p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        v = rss_anon_kib(p.pid)
        if v is not None:
            peak = max(peak, v)
        time.sleep(0.001)
    if p.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} exited {p.returncode}")
    return peak


def replay_peak(trace, out):
    r = subprocess.run([HEAPLAB, "replay", trace, "-q", "--timing", "recorded", "--sample-ms", "1", "-o", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench: replay of {trace} failed: {r.stderr.strip()}")
    j = json.load(open(out))
    return j["replay"]["memory"]["heap_peak_kib"], j["trace"]["live_bytes_peak"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="heaplab-fidelity-")
    sql = os.path.join(work, "load.sql")
    open(sql, "w").write(SQL)
    churn = os.path.join(BUILD, "capture", "testprogs", "churn")
    programs = {
        "sqlite3 (200,000-row table and index)": (["sqlite3", ":memory:", "-init", "/dev/null", "-cmd", f".read {sql}"], True),
        "churn 2 2000000 (std::map churn, 2 threads)": ([churn, "2", "2000000"], False),
    }
    print(f"medians of {a.reps} interleaved runs, glibc; KiB of anonymous memory at the peak")
    print()
    print("| program | program's peak | replay's heap peak | replay / program | live requested bytes peak |")
    print("|---|---|---|---|---|")
    for name, (cmd, devnull_stdin) in programs.items():
        trace = os.path.join(work, "t.hlt")
        subprocess.run([HEAPLAB, "capture", "-q", "-o", trace, "--"] + cmd, check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        prog, rep, live = [], [], 0
        for _ in range(a.reps):
            with open(os.devnull) as dn:
                prog.append(program_peak(cmd, stdin=dn if devnull_stdin else None))
            h, live = replay_peak(trace, os.path.join(work, "r.json"))
            rep.append(h)
        p, r = statistics.median(prog), statistics.median(rep)
        print(f"| {name} | {p:,.0f} | {r:,.0f} | {r / p:.2f} | {live / 1024:,.0f} |")


if __name__ == "__main__":
    main()
