#!/usr/bin/env python3
"""How long heaplab takes to refuse a replay that cannot run here (issue 16:
"a trace whose replay cannot fit gets its one-line error in under a
second"), on long traces, where a refusal that waits for the plan's build
waits for a pass over every call. Each refusal is run --reps times, each
time with an empty plan directory (a plan kept by the run before would
hide the build); the median wall time is printed with the exit status and
whether stderr was one line.

  - a captured heap bigger than memory: `victim_memory untouched G N`
    (G = this machine's available GiB + 4, blocks of a GiB never written,
    N pairs of small calls) captured, then replayed with --touch pages
  - the same with --touch all
  - the same trace, no room for its plan: HEAPLAB_PLAN_DIR on a 4 MiB
    tmpfs (root only; left out where it cannot be mounted); with --touch
    none it runs, its plan held in memory, where the plan takes at most
    half the memory available (before: refused)
  - more threads than a process can start here: a trace of
    vm.max_map_count / 2 + 100 threads of one call each
  - a heap bigger than memory that the trace does not state (a trace
    written by make_hostile_traces, not captured or imported: as one
    written by another tool or an older heaplab), reached only at its last call: refused where the
    plan's build finds it, here at the end; then the same with
    `--allocator all` (four replays asked for, one build)
  - the same from another tool: a glibc mtrace log of --import-pairs
    malloc/free pairs and a 1 TiB block at its last call, imported by
    each build itself (`heaplab import --from mtrace`; the import's time
    is printed), then replayed
  - an object table bigger than memory: a glibc mtrace log of --objects
    small blocks all live at once, then freed, imported by each build;
    replayed with --touch none (no heap written: only the table's slot
    for each object counts) on a machine said to have 128 MiB
    (HEAPLAB_MEMORY_AVAILABLE), and, for scale, on this one, where it runs
  - for scale: the captured trace's plan built and replayed (`replay
    --touch none`, which runs)

Usage: scripts/bench-refusals.py [--pairs 50000000] [--import-pairs 10000000] [--objects 20000000]
                                 [--reps 3] [--compare BUILD_DIR]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/); --compare
runs the same commands on another build, interleaved.
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


def tools(build):
    return {"heaplab": os.path.join(build, "cli", "heaplab"),
            "make": os.path.join(build, "capture", "format", "make_hostile_traces"),
            "victim": os.path.join(build, "capture", "testprogs", "victim_memory")}


def available_bytes():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    sys.exit("bench: MemAvailable not found in /proc/meminfo")


def run(args, env, plans):
    """Wall time, exit code and stderr of one command, with an empty plan directory."""
    shutil.rmtree(plans, ignore_errors=True)
    os.makedirs(plans, exist_ok=True)
    e = dict(os.environ)
    e["HEAPLAB_PLAN_DIR"] = plans
    e.update(env)
    t0 = time.monotonic()
    p = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=e, text=True)
    return time.monotonic() - t0, p.returncode, p.stderr


def import_each(builds, log, work, name, what):
    """Each build imports the mtrace log itself (its time printed), which then goes: {build: trace}."""
    traces = {}
    for i, (n, b) in enumerate(builds):
        traces[b] = os.path.join(work, f"{name}-import-{i}.hlt")
        t0 = time.monotonic()
        subprocess.run([tools(b)["heaplab"], "import", "--from", "mtrace", log, "-o", traces[b]], check=True,
                       stdout=subprocess.DEVNULL)
        print(f"{n}: imported {what} of mtrace in {time.monotonic() - t0:.1f} s")
    os.remove(log)
    return traces


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=50_000_000, help="small malloc/free pairs in the captured trace")
    ap.add_argument("--import-pairs", type=int, default=10_000_000,
                    help="small malloc/free pairs in the imported mtrace log")
    ap.add_argument("--objects", type=int, default=20_000_000,
                    help="small blocks live at once in the imported mtrace log of many objects")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compare", help="another build directory, measured on the same traces")
    a = ap.parse_args()
    builds = [("this build", BUILD)] + ([("--compare", a.compare)] if a.compare else [])
    for i, (_, b) in enumerate(builds):  # (the traces are made by this build's tools)
        for p in tools(b).values() if i == 0 else [tools(b)["heaplab"]]:
            if not os.path.exists(p):
                sys.exit(f"bench: {p} not found: build first (scripts/bootstrap.sh)")
    t = tools(BUILD)
    work = tempfile.mkdtemp(prefix="heaplab-bench-refusals-")
    tiny = os.path.join(work, "tiny")
    mounted = False
    try:
        gib = available_bytes() // (1 << 30) + 4
        captured = os.path.join(work, "untouched.hlt")
        t0 = time.monotonic()
        subprocess.run([t["heaplab"], "capture", "-q", "-o", captured, "--", t["victim"], "untouched", str(gib),
                        str(a.pairs)], check=True, stdout=subprocess.DEVNULL)
        print(f"captured victim_memory untouched {gib} {a.pairs:,} in {time.monotonic() - t0:.1f} s "
              f"({os.path.getsize(captured) / 1048576:.1f} MiB)")
        synthetic = os.path.join(work, "calls-huge.hlt")
        subprocess.run([t["make"], "calls-huge", synthetic, str(2 * a.pairs)], check=True)
        threads = os.path.join(work, "threads.hlt")
        with open("/proc/sys/vm/max_map_count") as f:
            many = int(f.read()) // 2 + 100
        subprocess.run([t["make"], "threads", threads, str(many)], check=True)
        log = os.path.join(work, "terabyte.mtrace")
        pair = b"@ ./p:[0x401000] + 0x55d0c0de10 0x30\n@ ./p:[0x401010] - 0x55d0c0de10\n"
        with open(log, "wb") as f:
            f.write(b"= Start\n")
            for done in range(0, a.import_pairs, 100_000):
                f.write(pair * min(100_000, a.import_pairs - done))
            f.write(b"@ ./p:[0x401020] + 0x7f0000000000 0x10000000000\n= End\n")
        imported = import_each(builds, log, work, "terabyte", f"{2 * a.import_pairs + 1:,} calls")
        # Many objects live at once: every block made, then every one freed.
        with open(log, "wb") as f:
            f.write(b"= Start\n")
            for lo in range(0, a.objects, 100_000):
                hi = min(a.objects, lo + 100_000)
                f.write(b"".join(b"@ ./p:[0x401000] + 0x%x 0x10\n" % (0x10000000 + 16 * i) for i in range(lo, hi)))
            for lo in range(0, a.objects, 100_000):
                hi = min(a.objects, lo + 100_000)
                f.write(b"".join(b"@ ./p:[0x401010] - 0x%x\n" % (0x10000000 + 16 * i) for i in range(lo, hi)))
            f.write(b"= End\n")
        crowd = import_each(builds, log, work, "objects",
                            f"{2 * a.objects:,} calls ({a.objects:,} objects live at once)")
        os.makedirs(tiny)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "heaplab-bench", tiny],
                                 stderr=subprocess.DEVNULL).returncode == 0
        calls = f"{2 * a.pairs + 2 * gib + 2:,} calls"
        cases = [
            (f"captured heap of {gib} GiB, {calls}: replay --touch pages", [captured, "--touch", "pages"], {}),
            ("the same: replay --touch all", [captured, "--touch", "all"], {}),
        ]
        if mounted:
            cases.append(("the same, its plan on a 4 MiB tmpfs: replay --touch none", [captured, "--touch", "none"],
                          {"HEAPLAB_PLAN_DIR": tiny}))
        cases += [
            (f"{many:,} threads: replay", [threads], {}),
            (f"a 1 TiB heap the trace does not state, at its last of {2 * a.pairs + 2:,} calls: replay", [synthetic],
             {}),
            ("the same: replay --allocator all", [synthetic, "--allocator", "all"], {}),
            (f"imported from mtrace: a 1 TiB block at its last of {2 * a.import_pairs + 1:,} calls: replay",
             [imported], {}),
            ("the same: replay --allocator all", [imported, "--allocator", "all"], {}),
            (f"imported from mtrace: {a.objects:,} objects live at once, a machine of 128 MiB: replay --touch none",
             [crowd, "--touch", "none"], {"HEAPLAB_MEMORY_AVAILABLE": str(128 << 20)}),
            ("for scale, the same on this machine: replay --touch none (runs)", [crowd, "--touch", "none"], {}),
            ("for scale, the captured trace's plan built and replayed: replay --touch none (runs)",
             [captured, "--touch", "none"], {}),
        ]
        plans = os.path.join(work, "plans")
        print(f"builds: {', '.join(f'{n} {b}' for n, b in builds)}; medians of {a.reps}")
        print("| refusal | " + " | ".join(f"{n}: wall, exit, lines" for n, _ in builds) + " |")
        print("|---|" + "---|" * len(builds))
        for name, args, env in cases:
            runs = {b: [] for _, b in builds}
            for _ in range(a.reps):
                for _, b in builds:
                    alloc = [] if "--allocator" in args else ["--allocator", "glibc"]
                    # (An import is each build's own.)
                    argv = [x[b] if isinstance(x, dict) else x for x in args]
                    runs[b].append(run([tools(b)["heaplab"], "replay", "-q", "--timeout", "300", *alloc, *argv], env,
                                       plans))
            cells = []
            for _, b in builds:
                rs = runs[b]
                wall = statistics.median(r[0] for r in rs)
                lines = rs[0][2].count("\n")
                cells.append(f"{wall:.3f} s, {rs[0][1]}, {lines}")
            print(f"| {name} | " + " | ".join(cells) + " |")
            for _, b in builds:
                err = runs[b][0][2].strip()
                if err:
                    print(f"    ({b}: {err[:300]})")
    finally:
        if mounted and subprocess.run(["umount", tiny]).returncode != 0:
            print(f"bench: {tiny} is still mounted: unmount it, then remove {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


main()
