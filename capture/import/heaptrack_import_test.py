#!/usr/bin/env python3
"""`heaplab import --from heaptrack` on recordings Debian's heaptrack makes
here:

  - of victim_mtrace (known calls): every "+" and "-" line of the recording
    is one event (but deallocations of blocks made before heaptrack started),
    and main()'s allocations appear in order with their sizes;
  - of a multi-threaded real program, xz -T2 compressing 24 MiB: imported,
    checked, and replayed on glibc, jemalloc, mimalloc and tcmalloc, every
    call as recorded.

Skips (77) only where heaptrack is not installed.

Usage: heaptrack_import_test.py HEAPLAB VICTIM_MTRACE WORKDIR
"""
import os
import random
import re
import shutil
import subprocess
import sys

HEAPLAB, VICTIM, WORK = sys.argv[1], sys.argv[2], sys.argv[3]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(*args, expect=0):
    r = subprocess.run(list(args), capture_output=True, text=True)
    check(r.returncode == expect, f"{' '.join(args)} exited {r.returncode}, not {expect}:\n{r.stderr[-1500:]}")
    return r


if not shutil.which("heaptrack"):
    print("SKIP: heaptrack is not installed (apt-get install heaptrack; scripts/bootstrap.sh installs it)")
    sys.exit(77)
shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)


def record(name, *argv):
    run("heaptrack", "-o", os.path.join(WORK, name), *argv)
    path = os.path.join(WORK, name + ".zst")
    check(os.path.exists(path), f"heaptrack wrote no {path}")
    text = subprocess.run(["zstd", "-dc", path], capture_output=True, text=True, check=True).stdout
    return path, text


# 1. The victim's known calls.
path, text = record("victim", VICTIM)
plus = sum(1 for l in text.splitlines() if l.startswith("+ "))
minus = sum(1 for l in text.splitlines() if l.startswith("- "))
out = os.path.join(WORK, "victim.hlt")
r = run(HEAPLAB, "import", "--from", "heaptrack", path, "-o", out)
m = re.search(r"imported (\d+) events \((\d+) allocations, (\d+) deallocations\)", r.stderr)
check(m, "no import summary: " + r.stderr)
events, allocs, deallocs = (int(x.replace(",", "")) for x in m.groups())
skipped = re.search(r"(\d+) deallocations of blocks allocated before heaptrack started", r.stderr)
check(allocs == plus and deallocs + (int(skipped.group(1)) if skipped else 0) == minus and events == allocs + deallocs,
      f"{plus} '+' and {minus} '-' lines, imported {allocs} allocations and {deallocs} deallocations:\n{r.stderr}")
run(HEAPLAB, "check", out)
sizes = [int(x) for x in re.findall(r"malloc\((\d+)\)", run(HEAPLAB, "cat", out).stdout)]
# main(): malloc(7), malloc(16), calloc(4, 8), realloc to 100, ..., aligned_alloc(512), realloc(NULL, 40).
want = [7, 16, 32, 100, 300, 512, 40]
it = iter(sizes)
check(all(any(s == w for s in it) for w in want), f"main()'s allocations {want} not in order in {sizes}")

# 2. A multi-threaded real program, replayed on every allocator.
data = os.path.join(WORK, "data.bin")
rng = random.Random(7)
with open(data, "wb") as f:
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(3, 9))) for _ in range(2000)]
    f.write(b" ".join(rng.choice(words) for _ in range(4_000_000))[: 24 << 20])
path, text = record("xz", "xz", "-T2", "-3", "-k", "-f", data)
trace = os.path.join(WORK, "xz.hlt")
run(HEAPLAB, "import", "--from", "heaptrack", path, "-o", trace)
run(HEAPLAB, "check", trace)
stats = run(HEAPLAB, "stats", trace).stdout
m = re.search(r"events: ([\d,]+)", stats)
check(m and int(m.group(1).replace(",", "")) > 50, "xz's trace has too few events:\n" + stats)
r = run(HEAPLAB, "replay", trace, "--allocator", "all")
rows = [l for l in r.stdout.splitlines() if re.match(r"(glibc|jemalloc|mimalloc|tcmalloc)/preload ", l)]
check(len(rows) == 4 and all(l.rstrip().endswith("yes") for l in rows),
      "not every allocator replayed xz's calls as recorded:\n" + r.stdout)
print(f"PASS (victim: {events} events; xz -T2: {m.group(1)} events, replayed on 4 allocators)")
