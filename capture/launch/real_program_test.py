#!/usr/bin/env python3
"""A real program nobody here wrote, captured end to end and checked against
an independent record of the same run.

Runs sqlite3 (Debian's) on a fixed SQL script twice: once under
`heaplab capture`, once under heaptrack. Both see every allocation and free
of the run; the test asserts that the trace passes `heaplab check` and that
the two tools agree call for call: the same sequence of allocation sizes and
the same sequence of freed-object sizes. heaptrack's own preload loads
libstdc++ into the program, which allocates (and frees at exit) its 72,704
byte exception pool; that one object is removed from heaptrack's side.

Usage: real_program_test.py HEAPLAB WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

SQL = """
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<20000)
INSERT INTO t SELECT x, printf('name-%d-%s', x, hex(randomblob(8))), x*1.5 FROM c;
CREATE INDEX t_name ON t(name);
SELECT count(*), sum(v) FROM t WHERE name LIKE 'name-1%';
SELECT name FROM t ORDER BY v DESC LIMIT 3;
UPDATE t SET name = upper(name) WHERE id % 7 = 0;
DELETE FROM t WHERE id % 3 = 0;
VACUUM;
"""
LIBSTDCXX_POOL = 72704


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def heaplab_sequences(heaplab, trace):
    out = subprocess.run([heaplab, "cat", "--format", "jsonl", trace], check=True,
                         capture_output=True, text=True).stdout
    sizes, allocs, frees = {}, [], []
    for line in out.splitlines():
        e = json.loads(line)
        if e.get("old"):
            frees.append(sizes[e["old"]])
        if e.get("id"):
            n = e.get("size", 0) * (e.get("count") or 1)
            sizes[e["id"]] = n
            allocs.append(n)
    return allocs, frees


def heaptrack_sequences(path):
    out = subprocess.run(["zstdcat", path], check=True, capture_output=True, text=True).stdout
    info, allocs, frees = [], [], []
    for line in out.splitlines():
        p = line.split()
        if not p:
            continue
        if p[0] == "a":
            info.append(int(p[1], 16))
        elif p[0] == "+":
            allocs.append(info[int(p[1], 16)])
        elif p[0] == "-":
            frees.append(info[int(p[1], 16)])
    return allocs, frees


def drop_one(seq, value, what):
    if value not in seq:
        fail(f"heaptrack's {what} lack the libstdc++ pool ({value} bytes)")
    seq.remove(value)


def main():
    heaplab, work = sys.argv[1], sys.argv[2]
    for tool in ("sqlite3", "heaptrack", "zstdcat"):
        if not shutil.which(tool):
            fail(f"{tool} is not installed (scripts/bootstrap.sh installs it)")
    os.makedirs(work, exist_ok=True)
    sql = os.path.join(work, "q.sql")
    with open(sql, "w") as f:
        f.write(SQL)
    cmd = ["sqlite3", ":memory:", "-init", "/dev/null", "-cmd", ".read " + sql]
    trace = os.path.join(work, "sqlite3.hlt")
    r = subprocess.run([heaplab, "capture", "-q", "-o", trace, "--"] + cmd,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"heaplab capture exited {r.returncode}: {r.stderr.strip()}")
    r = subprocess.run([heaplab, "check", trace], capture_output=True, text=True)
    if r.returncode != 0:
        fail("heaplab check: " + r.stdout + r.stderr)
    ht = os.path.join(work, "heaptrack")
    r = subprocess.run(["heaptrack", "-o", ht] + cmd, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"heaptrack exited {r.returncode}: {r.stderr.strip()}")
    h_allocs, h_frees = heaplab_sequences(heaplab, trace)
    t_allocs, t_frees = heaptrack_sequences(ht + ".zst")
    drop_one(t_allocs, LIBSTDCXX_POOL, "allocations")
    drop_one(t_frees, LIBSTDCXX_POOL, "frees")
    if len(h_allocs) < 100000:
        fail(f"only {len(h_allocs)} allocations captured")
    for name, a, b in (("allocations", h_allocs, t_allocs), ("frees", h_frees, t_frees)):
        if a != b:
            i = next((k for k in range(min(len(a), len(b))) if a[k] != b[k]), min(len(a), len(b)))
            fail(f"{name} differ: heaplab {len(a)}, heaptrack {len(b)}; first difference at #{i}")
    print(f"ok: sqlite3: {len(h_allocs)} allocations and {len(h_frees)} frees, "
          f"identical in heaplab's trace and heaptrack's record")


if __name__ == "__main__":
    main()
