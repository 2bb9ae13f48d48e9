#!/usr/bin/env python3
"""The four allocators on one captured real program, side by side.

Captures Debian's sqlite3 building, indexing, updating and vacuuming a
table of 20,000 rows (scripts/sqlite3-workload.sql, the demo's workload), then runs `heaplab replay TRACE --allocator all
--latency 4` once: one replay per allocator, each its own process, and the
table side by side on the console. Asserts that every allocator replays
every call exactly, that each shows the trace's live-bytes peak exactly
(the snapshot at the peak call) with a heap RSS there that is plausible
(at least 90% of the live bytes, at most 4 times), and that the allocators
differ: their heap peaks are not all the same and neither are their
malloc latency percentiles.

Usage: compare_real_test.py HEAPLAB WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

SQL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "sqlite3-workload.sql")
ALLOCATORS = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    heaplab, work = sys.argv[1], sys.argv[2]
    if not shutil.which("sqlite3"):
        fail("sqlite3 is not installed (scripts/bootstrap.sh installs it)")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace = os.path.join(work, "sqlite3.hlt")
    subprocess.run([heaplab, "capture", "-q", "-o", trace, "--", "sqlite3", ":memory:", "-init", "/dev/null",
                    "-cmd", ".read " + SQL], check=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)

    out = os.path.join(work, "compare.json")
    r = subprocess.run([heaplab, "replay", trace, "--allocator", "all", "--latency", "4", "-o", out],
                       capture_output=True, text=True)
    print(r.stdout, end="")
    if r.returncode != 0:
        fail(f"heaplab replay --allocator all exited {r.returncode}: {r.stderr}")
    lines = r.stdout.splitlines()
    if not lines or not lines[0].startswith("allocator ") or "heap peak" not in lines[0] or "malloc p99" not in lines[0]:
        fail("no table header: " + (lines[0] if lines else "(no output)"))
    for a in ALLOCATORS:
        row = [l for l in lines if l.startswith(a + "/preload ")]
        if len(row) != 1 or not row[0].endswith("yes"):
            fail(f"no faithful row for {a}: {row}")
    for a in ALLOCATORS:
        if f"heaplab: replaying on {a} (preload)" not in r.stderr:
            fail(f"no progress line for {a}: {r.stderr}")

    runs = json.load(open(out))
    if [x["allocator"]["name"] for x in runs] != ALLOCATORS:
        fail("runs: " + str([x["allocator"].get("name") for x in runs]))
    calls = {x["replay"]["calls"] for x in runs}
    if len(calls) != 1:
        fail(f"the allocators replayed different call counts: {calls}")
    peaks, p99s = {}, {}
    for x in runs:
        a, p, m = x["allocator"]["name"], x["replay"], x["replay"]["memory"]
        if not p["faithful"]:
            fail(f"{a}: not faithful")
        live = x["trace"]["live_bytes_peak"]
        if m["live_bytes_peak_sampled"] != live:
            fail(f"{a}: live peak {m['live_bytes_peak_sampled']} measured, {live} in the trace")
        heap = m["heap_kib_at_live_peak"] * 1024
        if not 0.9 * live <= heap <= 4 * live:
            fail(f"{a}: heap RSS {heap} at a live peak of {live} bytes")
        if m["peak_rss_kib"] * 1024 < heap:
            fail(f"{a}: peak RSS {m['peak_rss_kib']} KiB below the heap at the live peak")
        lat = p["latency"]
        if lat["timer_overhead_ns"] <= 0:
            fail(f"{a}: no timer overhead measured")
        mal = lat["ops"]["malloc"]
        if not mal["p50_ns"] <= mal["p99_ns"] <= mal["max_ns"]:
            fail(f"{a}: malloc percentiles out of order: {mal}")
        if mal["p50_ns"] > 10000 or mal["p99_ns"] > 1e6:
            fail(f"{a}: implausible malloc latency: {mal}")
        peaks[a] = m["heap_peak_kib"]
        p99s[a] = (mal["p99_ns"], lat["ops"]["free"]["p99_ns"], mal["p99.9_ns"])
    if len(set(peaks.values())) < 3:
        fail(f"the heap peaks hardly differ: {peaks}")
    if len(set(p99s.values())) < 2:
        fail(f"the latencies do not differ: {p99s}")
    print("heap peaks (KiB):", peaks)
    print("malloc p99, free p99, malloc p99.9 (ns):", p99s)
    print("PASS")


main()
