#!/usr/bin/env python3
"""Instructions a call for heaplab's passes over a trace, counted by
valgrind's callgrind (issue 16): a figure this noisy 2-core VM cannot move.
Wall and CPU times here swing 10% between runs of the same binary and up to
3x between days, which hides changes of a few percent; instruction counts
are exact (they do not see cache misses, which the timed benchmarks do).

`churn THREADS OPS` is captured once with its raw file kept (or --raw names a
kept raw file) and normalised into a trace. Then, for this build and, with
--compare BUILD_DIR, that one too, each pass runs once under callgrind:
  normalise  `heaplab import --from heaplab-raw --level L` of the raw file
             (both of the normaliser's threads; L: --level, default 1, the
             level live capture uses while the program keeps the cores busy)
  plan       `heaplab replay --allocator glibc` with an empty plan
             directory, the heaplab process only (callgrind does not follow
             the replayer, its child): building the plan (its three
             threads), and around it hashing the trace for its content id,
             keeping the plan and reading the result
  stats      `heaplab stats`
  check      `heaplab check`
and prints instructions per call (the trace's allocation and release calls),
the ratio between builds (this build's count over the other's), and the
functions that count most. (Passes with helper threads that poll vary by a
few tenths of a percent between runs.) With normalise among the passes, the
two builds' normalised traces must hold the same events (`heaplab cat`), or
it says so and exits 1.

Usage: scripts/bench-instructions.py [--threads 2] [--ops 200000] [--raw FILE.hlraw]
           [--passes normalise,plan,stats,check] [--level 1] [--top 8] [--compare BUILD_DIR]
HEAPLAB_BUILD_DIR picks the build to measure (default: build/).
"""
import argparse
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("HEAPLAB_BUILD_DIR", os.path.join(REPO, "build"))
PASSES = ("normalise", "plan", "stats", "check")


def heaplab(build):
    return os.path.join(build, "cli", "heaplab")


def fail(msg):
    sys.exit(f"bench-instructions: {msg}")


def callgrind(cmd, out, env=None):
    """Runs cmd under callgrind; returns its instruction count."""
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + cmd,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        last = r.stderr.strip().splitlines()[-1:] or ["(no message)"]
        fail(f"{' '.join(cmd)} failed under callgrind: {last[0]}")
    with open(out) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    fail(f"{out}: no instruction total")


def top_functions(out, n):
    """(instructions, function) for the n functions that count most (self;
    a function's lines from several source files, inlined, summed)."""
    r = subprocess.run(["callgrind_annotate", "--threshold=100", out], capture_output=True, text=True)
    by_name = {}
    for line in r.stdout.splitlines():
        if "Auto-annotated source" in line:
            break  # (the table of functions is over)
        m = re.match(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*)$", line)
        if not m or "PROGRAM TOTALS" in line or "=>" in line or "events annotated" in line:
            continue
        name = m.group(2)
        obj = re.search(r" \[([^\]]*)\]$", name)
        name = re.sub(r" \[[^\]]*\]$", "", name)  # the object file
        name = name.split(":", 1)[1] if re.match(r"^[^ ]*:", name) else name
        if re.match(r"^0x[0-9a-f]+$", name) and obj:  # no symbols: the library's name
            name = f"(code in {os.path.basename(obj.group(1))})"
        by_name[name] = by_name.get(name, 0) + int(m.group(1).replace(",", ""))
    return sorted(((ir, fn) for fn, ir in by_name.items()), reverse=True)[:n]


def short(name, width=100):
    """The name without namespaces heaplab's own, argument lists or template
    arguments: build_plan::{lambda#3}."""
    if name.startswith("(code in "):
        return name
    name = name.replace("(anonymous namespace)::", "").replace("heaplab::", "")
    out, depth = [], 0
    for ch in name:
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    name = "".join(out).replace(" const", "").replace("[clone .constprop.0]", "").strip()
    return name if len(name) <= width else name[: width - 3] + "..."


def events_digest(build, trace):
    p = subprocess.run([heaplab(build), "cat", trace], capture_output=True)
    if p.returncode != 0:
        fail(f"{build}: heaplab cat {trace} failed")
    return hashlib.sha256(p.stdout).hexdigest()


def calls_of(trace):
    r = subprocess.run([heaplab(BUILD), "stats", "--json", trace], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"heaplab stats {trace} failed: {r.stderr.strip()}")
    ops = json.loads(r.stdout).get("operations")
    if not isinstance(ops, dict):
        fail("heaplab stats --json: no operations")
    return sum(int(v) for k, v in ops.items() if k not in ("thread_start", "thread_end", "lost"))


def run_pass(build, name, raw, trace, work, level, tag):
    out = os.path.join(work, f"{tag}.{name}.callgrind")
    if name == "normalise":
        hlt = os.path.join(work, f"{tag}.normalised.hlt")
        n = callgrind([heaplab(build), "import", "--from", "heaplab-raw", "--level", str(level), "-o", hlt, raw], out)
        return n, out, hlt
    if name == "plan":
        plans = os.path.join(work, f"{tag}.plans")
        shutil.rmtree(plans, ignore_errors=True)
        env = dict(os.environ, HEAPLAB_PLAN_DIR=plans)
        n = callgrind([heaplab(build), "replay", trace, "-q", "--allocator", "glibc", "-o",
                       os.path.join(work, f"{tag}.replay.json")], out, env)
        shutil.rmtree(plans, ignore_errors=True)
        return n, out, None
    n = callgrind([heaplab(build), name, trace], out)
    return n, out, None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ops", type=int, default=200000)
    ap.add_argument("--raw", help="a kept .hlraw file (default: capture churn)")
    ap.add_argument("--passes", default="normalise,plan,stats,check")
    ap.add_argument("--level", type=int, default=1)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--compare", help="another build directory, counted on the same raw file and trace")
    a = ap.parse_args()
    passes = [p for p in a.passes.split(",") if p]
    for p in passes:
        if p not in PASSES:
            fail(f"--passes: unknown pass {p!r} (known: {', '.join(PASSES)})")
    if not 1 <= a.level <= 22:
        fail(f"--level: zstd levels are 1 to 22 (got {a.level})")
    if shutil.which("valgrind") is None or shutil.which("callgrind_annotate") is None:
        fail("valgrind not found (Debian: apt-get install valgrind; scripts/bootstrap.sh installs it)")
    if not os.access(heaplab(BUILD), os.X_OK):
        fail(f"{BUILD}: no cli/heaplab there (build first, or set HEAPLAB_BUILD_DIR)")
    builds = [("this", BUILD)]
    if a.compare:
        if os.path.realpath(a.compare) == os.path.realpath(BUILD):
            fail(f"--compare {a.compare} is the build measured already")
        if not os.access(heaplab(a.compare), os.X_OK):
            fail(f"--compare {a.compare}: no cli/heaplab there")
        builds.append(("compare", a.compare))
    work = tempfile.mkdtemp(prefix="heaplab-instructions-")
    try:
        raw = a.raw
        if not raw:
            rawdir = os.path.join(work, "raw")
            churn = os.path.join(BUILD, "capture", "testprogs", "churn")
            c = subprocess.run([heaplab(BUILD), "capture", "-q", "--normalise", "after", "--keep-raw", "--raw-dir",
                                rawdir, "-o", os.path.join(work, "churn.hlt"), "--", churn, str(a.threads), str(a.ops)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if c.returncode != 0:
                fail(f"capturing churn {a.threads} {a.ops} failed: {c.stderr.strip()}")
            raws = glob.glob(os.path.join(rawdir, "*.hlraw"))
            if len(raws) != 1:
                fail(f"expected one raw file, found {len(raws)}")
            raw = raws[0]
        trace = os.path.join(work, "trace.hlt")
        r = subprocess.run([heaplab(BUILD), "import", "--from", "heaplab-raw", "-o", trace, raw],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            fail(f"normalising {raw} failed: {r.stderr.strip()}")
        calls = calls_of(trace)
        if calls == 0:
            fail(f"{raw}: no allocation or release calls to count per")
        what = os.path.basename(raw) if a.raw else f"churn {a.threads} {a.ops}"
        print(f"{what}: {calls:,} calls; instructions a call (callgrind), zstd level {a.level} for normalise")
        totals = {}
        digests = {}
        for name in passes:
            for tag, build in builds:
                n, out, hlt = run_pass(build, name, raw, trace, work, a.level, tag)
                totals[(name, tag)] = n
                if hlt:
                    digests[tag] = events_digest(BUILD, hlt)
                print(f"\n{name}, {tag} build ({build}): {n:,} instructions, {n / calls:.1f} a call")
                for ir, fn in top_functions(out, a.top):
                    print(f"  {ir / calls:8.1f}  {short(fn)}")
        print("\n| pass | this build | " + ("compare build | this / compare |" if a.compare else ""))
        print("|---|---|" + ("---|---|" if a.compare else ""))
        for name in passes:
            mine = totals[(name, "this")] / calls
            row = f"| {name} | {mine:.1f} |"
            if a.compare:
                other = totals[(name, "compare")] / calls
                row += f" {other:.1f} | {mine / other:.3f}x |"
            print(row)
        if len(set(digests.values())) > 1:
            print("bench-instructions: the two builds' normalised traces hold different events", file=sys.stderr)
            return 1
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
