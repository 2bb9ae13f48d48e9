#!/usr/bin/env python3
"""Memory of heaplab's commands on traces with many memory records (MEMX:
the program's own mmap, munmap and madvise calls, the pages it touched, the
calls it timed, the resident pages of its large blocks).

- A capture: `heaplab capture` of `victim_memory loop R` (R rounds of mmap,
  a page written, madvise, munmap, a malloc and a free: 4 memory records
  and 2 heap calls a round), then `stats`, `check` and `replay --allocator
  glibc` of that trace.
- Made traces: the same 4,000 heap calls and N memory records each (made by
  build/capture/format/make_hostile_traces memory: touches and advice of
  one mapping, timed calls, large blocks' resident pages), then the same
  three commands.

Each command runs --reps times; the median of its peak RSS (its largest
process: heaplab, the program under capture or the replayer, from wait4)
and of its wall time are printed, and for a capture the largest scratch file
its memory records were sorted through (beside the trace; the raw blocks'
scratch is measured by bench-capture-live.py). With --compare BUILD_DIR the same
commands of another build run interleaved with this one's (on this build's
captures and traces).

Usage: scripts/bench-memory-records.py [--rounds 1000000] [--records 1000000,5000000] [--reps 3]
                                       [--compare BUILD_DIR]
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
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))


def measure(args, env):
    t0 = time.monotonic()
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.stderr.write(f"{' '.join(args)}: exit {code}: {err.decode(errors='replace').strip()}\n")
    # A capture's summary names the scratch file its memory records were
    # sorted through (beside the trace), if they were spilled.
    # (None: no such line, nothing was spilled; the largest of several traces.)
    found = [float(x) for x in re.findall(rb"sorted through a scratch file of at most ([0-9.]+) MiB", err)]
    return time.monotonic() - t0, usage.ru_maxrss, code, max(found) if found else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=1000000, help="victim_memory loop rounds (0: no capture)")
    ap.add_argument("--records", default="1000000,5000000", help="made traces' memory records ('': none)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compare", help="another build directory, measured interleaved with this one")
    a = ap.parse_args()
    builds = [("this", BUILD)] + ([("compare", a.compare)] if a.compare else [])
    make = os.path.join(BUILD, "capture", "format", "make_hostile_traces")
    victim = os.path.join(BUILD, "capture", "testprogs", "victim_memory")
    for _, b in builds:
        if not os.access(os.path.join(b, "cli", "heaplab"), os.X_OK):
            sys.exit(f"bench-memory-records: no heaplab in {b} (build it first)")
    for tool in (make, victim):
        if not os.access(tool, os.X_OK):
            sys.exit(f"bench-memory-records: {tool} is missing (build it first)")
    work = tempfile.mkdtemp(prefix="heaplab-memx-")
    try:
        env = dict(os.environ, HEAPLAB_PLAN_DIR=os.path.join(work, "plans"), HEAPLAB_PLAN_CACHE_MIB="0")
        print("| memory records | trace | command | build | exit | peak RSS | wall | sort scratch |")
        print("|---|---|---|---|---|---|---|---|", flush=True)

        def label(name, b):
            return name if name == "this" else os.path.basename(os.path.normpath(b))

        def run_all(what, trace, size, commands):
            for cmd in commands:
                runs = {name: [] for name, _ in builds}
                for rep in range(a.reps):
                    order = builds if rep % 2 == 0 else list(reversed(builds))
                    for name, b in order:
                        heaplab = os.path.join(b, "cli", "heaplab")
                        if cmd[0] == "capture":
                            args = [heaplab, "capture", "-o", trace + "." + name, "--"] + cmd[1:]
                        else:
                            args = [heaplab, cmd[0], trace] + cmd[1:]
                        if cmd[0] == "replay":
                            args += ["-o", os.path.join(work, "result.json")]
                        runs[name].append(measure(args, env))
                for name, b in builds:
                    r = runs[name]
                    wall = statistics.median(x[0] for x in r)
                    rss = statistics.median(x[1] for x in r) / 1024
                    codes = sorted({x[2] for x in r})
                    spilled = [x[3] for x in r if x[3] is not None]
                    scratch = "" if cmd[0] != "capture" else f"{max(spilled):.1f} MiB" if spilled else "none"
                    shown = "capture victim_memory loop" if cmd[0] == "capture" else " ".join(cmd)
                    print(f"| {what} | {size()} | `{shown}` | {label(name, b)} | "
                          f"{','.join(map(str, codes))} | {rss:,.0f} MiB | {wall:.2f} s | {scratch} |", flush=True)

        reads = (["stats"], ["check"], ["replay", "-q", "--allocator", "glibc"])
        if a.rounds:
            trace = os.path.join(work, "loop.hlt")
            mib = lambda: f"{os.path.getsize(trace + '.this') / 2**20:.1f} MiB"
            run_all(f"{4 * a.rounds:,} (captured)", trace, mib, [["capture", victim, "loop", str(a.rounds)]])
            shutil.copy(trace + ".this", trace)
            run_all(f"{4 * a.rounds:,} (captured)", trace, mib, reads)
        for n in [int(float(x)) for x in a.records.split(",") if x]:
            trace = os.path.join(work, f"memx-{n}.hlt")
            subprocess.run([make, "memory", trace, str(n)], check=True)
            run_all(f"{n:,} (made)", trace, lambda: f"{os.path.getsize(trace) / 2**20:.1f} MiB", reads)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
