#!/usr/bin/env python3
"""`heaplab run`, `report` and `results` end to end, on a small experiment
(a victim program captured by the experiment itself, two allocators, one
warm-up and three measured rounds: 8 runs).

  - mistakes in an experiment file: one line naming file, line and key, exit 2
  - a complete run: every cell stored once, in the interleaved order, the
    report printed, `results list` and both exports
  - killed (SIGKILL) part-way: the same command resumes, runs only what is
    missing, and the store ends with every cell exactly once
  - interrupted (SIGINT): exit 130, what was stored stays, resume completes
  - `--shard 1/2` and `--shard 2/2` into two stores, merged: the same cells,
    traces and outcomes as the one-piece run
  - two experiments writing to one store at once: both complete
  - an allocator that hangs: its run is killed at the timeout and stored as
    failed, the others run, and the whole takes bounded time

Usage: runner_test.py HEAPLAB VICTIM WORKDIR TEST_ALLOC_NULL
"""
import csv
import io
import json
import re
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

HEAPLAB, VICTIM, WORK, TEST_ALLOC = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
CELLS = 8


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def heaplab(*args, expect=0):
    r = subprocess.run([HEAPLAB, *args], capture_output=True, text=True)
    if expect is not None and r.returncode != expect:
        fail(f"heaplab {' '.join(args)} exited {r.returncode}, not {expect}: {r.stderr.strip()[-800:]}")
    return r


def experiment(name, reps=3, extra="", trace_file=None):
    path = os.path.join(WORK, name + ".yaml")
    trace = f"file: {trace_file}" if trace_file else f'capture: [{VICTIM}, threads, "2", "2", "3000"]'
    with open(path, "w") as f:
        f.write(f"""name: {name}
traces:
  - name: threads
    {trace}
allocators:
  - glibc
  - {{name: jemalloc, label: je, env: {{MALLOC_CONF: "narenas:2"}}}}
replay: {{sample_ms: 5}}
repetitions: {reps}
warmup: 1
{extra}""")
    return path


def rows(results, session=None):
    db = sqlite3.connect(os.path.join(results, "heaplab.db"))
    q = "SELECT session, cell, seq, trace, trace_id, allocator, rep, warmup, exit, faithful FROM runs"
    out = db.execute(q + (" WHERE session = ?" if session else "") + " ORDER BY seq",
                     (session,) if session else ()).fetchall()
    db.close()
    return out


def count(results):
    try:
        db = sqlite3.connect(os.path.join(results, "heaplab.db"), timeout=5)
        n = db.execute("SELECT count(*) FROM runs").fetchone()[0]
        db.close()
        return n
    except sqlite3.Error:
        return 0


def bad_files():
    # A file that is not a trace; a trace without times (an import).
    with open(os.path.join(WORK, "notatrace.txt"), "w") as f:
        f.write("malloc(16) = 0x1000\n")
    heaplab("import", "--from", "cmt-text", os.path.join(WORK, "notatrace.txt"), "-o",
            os.path.join(WORK, "untimed.hlt"))
    cases = [
        ("traces: [{name: t, file: notatrace.txt}]\nallocators: [glibc]\n",
         "bad.yaml: trace 't': notatrace.txt: offset 0: not a heaplab trace (bad magic)"),
        ("traces: [{name: t, file: untimed.hlt}]\nallocators: [glibc]\n",
         "bad.yaml: trace 't': untimed.hlt has no timestamps (imported from a log without times?), and the "
         "experiment replays at the recorded pace, its default: give it 'replay: {timing: fast}'"),
        ("traces: [{name: t, file: untimed.hlt}]\nallocators: [glibc]\nreplay: {timing: fast, speed: 2}\n",
         "bad.yaml:3: 'speed' paces a replay at the recorded pace, and this one has 'timing: fast'"),
        ("traces: [{name: t, file: untimed.hlt}]\nallocators: [{name: '{experiment_dir}/nosuch.so', label: x}]\n",
         "bad.yaml: allocator 'x': allocator './nosuch.so': "),
        ("traces: [{name: t, file: x.hlt}]\nallocators: [glibc]\nrepetitons: 3\n",
         "bad.yaml:3: unknown key 'repetitons'"),
        ("traces: [{name: t, file: x.hlt}]\nallocators: [glibc]\nreplay: {touch: most}\n",
         "bad.yaml:3: 'touch': expected one of none, first, pages, all, recorded, not 'most'"),
        ("traces: [{name: t, file: missing.hlt}]\nallocators: [glibc]\n",
         "bad.yaml: trace 't': missing.hlt: No such file or directory"),
        ("traces: [{name: t, capture: [true]}]\nallocators: [nosuchalloc]\n",
         "bad.yaml: allocator 'nosuchalloc': allocator 'nosuchalloc': unknown name"),
    ]
    for text, want in cases:
        path = os.path.join(WORK, "bad.yaml")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run([HEAPLAB, "run", "bad.yaml", "--results", os.path.join(WORK, "bad")],
                           capture_output=True, text=True, cwd=WORK)
        check(r.returncode == 2, f"bad file exited {r.returncode}: {r.stderr}")
        lines = r.stderr.splitlines()
        check(len(lines) == 1 and lines[0].startswith("heaplab: error: " + want),
              f"bad file: {r.stderr!r}, wanted {want!r}")
        check(not os.path.exists(os.path.join(WORK, "bad", "heaplab.db")), "a bad file created a store")


def complete_run():
    res = os.path.join(WORK, "one")
    r = heaplab("run", experiment("small"), "--results", res)
    check("trace threads: median of 3 run(s)" in r.stdout, "no report: " + r.stdout)
    check("8 runs now, 0 stored before" in r.stderr, r.stderr)
    got = rows(res)
    check(len(got) == CELLS, f"{len(got)} runs stored")
    check([g[2] for g in got] == list(range(CELLS)), "seq not 0..7")
    # Interleaved: each round has both allocators, the first one alternating.
    firsts = [got[i][5] for i in range(0, CELLS, 2)]
    check(firsts == ["glibc", "je", "glibc", "je"], f"order {firsts}")
    check(all(g[8] == "ok" and g[9] == 1 for g in got), f"not all ok: {got}")
    check(sum(g[7] for g in got) == 2, "warm-up runs")
    check(len({g[4] for g in got}) == 1, "one trace id")
    # The allocator's environment reached the replay.
    db = sqlite3.connect(os.path.join(res, "heaplab.db"))
    result = json.loads(db.execute("SELECT result FROM runs WHERE allocator = 'je' LIMIT 1").fetchone()[0])
    check(result["allocator"]["settings"].get("MALLOC_CONF") == "narenas:2", "env: " + str(result["allocator"]))
    spec, finished = db.execute("SELECT spec, finished FROM sessions").fetchone()
    check("name: small" in spec and finished, "session row")
    db.close()
    # Running it again starts a new session (the old one is complete).
    r = heaplab("run", experiment("small"), "--results", res, "-q")
    check(len(rows(res)) == 2 * CELLS, "a second session")
    lst = heaplab("results", "list", "--results", res).stdout
    check(lst.count("small-") == 2 and lst.count("8/8") == 2, lst)
    rep = heaplab("report", "--results", res, "--format", "csv").stdout
    recs = list(csv.DictReader(io.StringIO(rep)))
    check({x["allocator"] for x in recs} == {"glibc", "je"} and all(x["n"] == "3" for x in recs), rep)
    md = heaplab("report", "--results", res, "--format", "md", "--metric", "wall_s").stdout
    check("| metric | glibc | je |" in md, md)
    plots = os.path.join(WORK, "plots")
    r = heaplab("report", "--results", res, "--plots", plots, "--metric", "wall_s", "--metric", "heap_peak_mib")
    names = sorted(os.listdir(plots))
    check(names == ["index.html"], f"plots: {names}")
    page = open(os.path.join(plots, "index.html")).read()
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    tr = data["traces"][0]
    check(tr["name"] == "threads" and [s["allocator"] for s in tr["heap"]] == ["glibc", "je"], f"plots: {tr}")
    check([m["name"] for m in tr["metrics"]] == ["wall_s", "heap_peak_mib"], f"plots: {tr['metrics']}")
    for m in tr["metrics"]:
        check([b["allocator"] for b in m["bars"]] == ["glibc", "je"] and
              all(b["min"] <= b["median"] <= b["max"] for b in m["bars"]), f"plots: {m}")
    check("Chart.js v3" in page and "function render()" in page, "plots: Chart.js or the page script missing")
    # A stored result that cannot be read (emptied here) costs that run, not
    # the reports of the whole store.
    broken = os.path.join(WORK, "broken")
    shutil.copytree(res, broken)
    db = sqlite3.connect(os.path.join(broken, "heaplab.db"))
    db.execute("UPDATE runs SET result = '' WHERE rowid = (SELECT max(rowid) FROM runs)")
    db.commit()
    db.close()
    heaplab("report", "--results", broken, "--plots", os.path.join(WORK, "broken-plots"))
    heaplab("dashboard", "--results", broken, "-o", os.path.join(WORK, "broken-site"))
    heaplab("results", "export", "--results", broken, "--format", "gbench")
    exp = heaplab("results", "export", "--results", res).stdout
    check(len(list(csv.DictReader(io.StringIO(exp)))) == CELLS, "csv export")
    gb = json.loads(heaplab("results", "export", "--results", res, "--format", "gbench").stdout)
    check(len(gb["benchmarks"]) == 6 and gb["benchmarks"][0]["time_unit"] == "ms", "gbench export")
    check(all(b["repetitions"] == 3 and b["threads"] >= 2 for b in gb["benchmarks"]),
          f"gbench repetitions and threads: {[(b['repetitions'], b['threads']) for b in gb['benchmarks']]}")
    # Google Benchmark's own compare.py on two sessions (Debian: libbenchmark-tools, python3-scipy).
    sessions = [l.split()[0] for l in lst.splitlines()[1:]]
    files = []
    for s in sessions:
        f = os.path.join(WORK, s + ".gbench.json")
        heaplab("results", "export", "--results", res, "--session", s, "--format", "gbench", "-o", f)
        files.append(f)
    cmp = subprocess.run(["/usr/bin/python3", "/usr/share/benchmark/compare.py", "benchmarks", *files],
                         capture_output=True, text=True)
    check(cmp.returncode == 0 and "threads/je_pvalue" in cmp.stdout and "threads/glibc" in cmp.stdout,
          f"compare.py: {cmp.returncode} {cmp.stdout[-500:]} {cmp.stderr[-500:]}")
    r = heaplab("report", "--results", res, "--session", "nope", expect=2)
    check("no session 'nope'" in r.stderr, r.stderr)
    empty = os.path.join(WORK, "empty")
    os.makedirs(empty)
    r = heaplab("report", "--results", empty, expect=2)
    check("no results store at" in r.stderr and not os.listdir(empty), r.stderr)
    # --alpha as gate and diff take it; --plots checked before the report.
    r = heaplab("report", "--results", res, "--alpha", "1", expect=2)
    check(r.stderr == "heaplab: error: --alpha 1: a significance level between 0 and 1\n", r.stderr)
    not_dir = os.path.join(WORK, "plots-file")
    open(not_dir, "w").close()
    r = heaplab("report", "--results", res, "--plots", not_dir, expect=2)
    check(r.stdout == "" and r.stderr.startswith(f"heaplab: error: report: --plots {not_dir}: cannot create"),
          f"{r.stdout[:200]!r} {r.stderr!r}")
    # results merge takes a results directory, as --results does.
    r = heaplab("results", "merge", "--results", os.path.join(WORK, "merged-dir"), res)
    check(re.search(rf"heaplab: {re.escape(res)}/heaplab.db: [1-9][0-9]* runs added", r.stderr), r.stderr)
    first = rows(res)[0][0]
    return [g for g in rows(res) if g[0] == first]


def run_and_kill(res, path):
    """Runs the experiment (16 runs) and SIGKILLs it once 3 are stored;
    returns how many were."""
    p = subprocess.Popen([HEAPLAB, "run", path, "--results", res, "-q"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 60
    while count(res) < 3 and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    before = count(res)
    check(3 <= before < 16, f"{before} runs before the kill")
    return before


def killed_and_resumed():
    res = os.path.join(WORK, "killed")
    path = experiment("slow", reps=7)  # 16 runs
    before = run_and_kill(res, path)
    r = heaplab("run", path, "--results", res)
    check(f"{16 - before} runs now, {before} stored before" in r.stderr, r.stderr)
    got = rows(res)
    check(len(got) == 16 and len({g[1] for g in got}) == 16, f"{len(got)} runs after resuming")
    check(len({g[0] for g in got}) == 1, "one session")


def changed_trace_on_resume():
    """A resume on a trace file whose content changed since the session's
    runs replayed it stops with one line (exit 2), where its runs were
    mixed with the other trace's in one session; the trace put back, it
    completes with one trace id."""
    res = os.path.join(WORK, "changed")
    a, b, t = (os.path.join(WORK, n) for n in ("a.hlt", "b.hlt", "t.hlt"))
    heaplab("capture", "-q", "-o", a, "--", VICTIM, "threads", "2", "2", "3000")
    heaplab("capture", "-q", "-o", b, "--", VICTIM, "threads", "2", "2", "2000")
    shutil.copyfile(a, t)
    path = experiment("changed", reps=7, trace_file=t)
    before = run_and_kill(res, path)
    shutil.copyfile(b, t)
    r = heaplab("run", path, "--results", res, "-q", expect=2)
    check(r.stderr.startswith(f"heaplab: error: trace 'threads': {t} is not the trace this session's runs replayed "
                              "(its content id is ") and r.stderr.count("\n") == 1, r.stderr)
    check(count(res) == before, f"{count(res)} runs after the refused resume, {before} before")
    shutil.copyfile(a, t)
    heaplab("run", path, "--results", res, "-q")
    got = rows(res)
    check(len(got) == 16 and len({g[4] for g in got}) == 1, f"{len(got)} runs, trace ids {set(g[4] for g in got)}")


def interrupted_and_resumed():
    res = os.path.join(WORK, "interrupted")
    path = experiment("int", reps=7)
    p = subprocess.Popen([HEAPLAB, "run", path, "--results", res, "-q"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.time() + 60
    while count(res) < 2 and time.time() < deadline and p.poll() is None:
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C: the whole process group
    err = p.communicate()[1]
    check(p.returncode == 130, f"interrupted run exited {p.returncode}: {err}")
    check("interrupted: run the same command again to continue" in err, err)
    before = count(res)
    heaplab("run", path, "--results", res, "-q")
    got = rows(res)
    check(len(got) == 16 and all(g[8] == "ok" for g in got), f"after the interrupt: {len(got)} runs, {before} before")


def resumed_twice_at_once():
    """Two heaplabs resuming one killed session at the same moment: exactly
    one runs it (its claim is atomic); the other says the session was just
    taken up, or, if it looked once the first had claimed it, runs a session
    of its own. No cell of the killed session runs twice."""
    res = os.path.join(WORK, "race")
    path = experiment("race", reps=7)  # 16 runs
    before = run_and_kill(res, path)
    killed = rows(res)[0][0]
    ps = [subprocess.Popen([HEAPLAB, "run", path, "--results", res], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [(p.communicate(timeout=120)[1], p.returncode) for p in ps]
    got = rows(res, killed)
    check(len(got) == 16 and len({g[1] for g in got}) == 16, f"killed session: {len(got)} runs after two resumes")
    resumed = [e for e, c in outs if c == 0 and f"{16 - before} runs now, {before} stored before" in e]
    check(len(resumed) == 1, f"not one resume of the killed session: {outs}")
    err, code = next(o for o in outs if o[0] != resumed[0])
    others = {g[0] for g in rows(res)} - {killed}
    if code == 0:  # it started after the claim: a session of its own
        check(len(others) == 1 and len(rows(res, others.pop())) == 16, f"second runner: {err}")
    else:
        check(f"session '{killed}' was just taken up by heaplab" in err and not others, f"second runner: {code} {err}")


def sharded(one):
    a, b, merged = (os.path.join(WORK, d) for d in ("shard1", "shard2", "merged"))
    r = heaplab("run", experiment("small"), "--results", a, "--shard", "1/2", "--session", "n1", expect=2)
    check("--shard needs trace files" in r.stderr, r.stderr)
    trace = os.path.join(WORK, "threads.hlt")
    heaplab("capture", "-q", "-o", trace, "--", VICTIM, "threads", "2", "2", "3000")
    path = experiment("small", trace_file=trace)
    r = heaplab("run", path, "--results", a, "--shard", "1/2", expect=2)
    check("--shard needs --session ID" in r.stderr, r.stderr)
    heaplab("run", path, "--results", a, "--shard", "1/2", "--session", "nightly-1", "-q")
    heaplab("run", path, "--results", b, "--shard", "2/2", "--session", "nightly-1", "-q")
    r = heaplab("run", path, "--results", b, "--shard", "1/2", "--session", "nightly-1", "-q", expect=2)
    check("session 'nightly-1' was run as shard 2/2, not as shard 1/2" in r.stderr, r.stderr)
    r = heaplab("run", path, "--results", b, "--shard", "2/2", "--session", "nightly-1", "--new", "-q", expect=2)
    check("--new: session 'nightly-1' exists" in r.stderr, r.stderr)
    check(len(rows(a)) == 4 and len(rows(b)) == 4, "shard sizes")
    r = heaplab("results", "merge", os.path.join(a, "heaplab.db"), os.path.join(b, "heaplab.db"),
                "--results", merged)
    got = rows(merged)
    key = lambda g: (g[1], g[2], g[3], g[5], g[6], g[7], g[8], g[9])
    check([key(g) for g in got] == [key(g) for g in one], f"merged shards differ:\n{got}\n{one}")
    check(len({g[0] for g in got}) == 1 and "finished" in r.stdout, "merged session: " + r.stdout)
    check("4 runs added" in r.stderr, r.stderr)
    r = heaplab("results", "merge", os.path.join(merged, "heaplab.db"), "--results", merged, expect=2)
    check("is the store being merged into" in r.stderr, r.stderr)
    # Merging a shard again keeps what is there and says so.
    r = heaplab("results", "merge", os.path.join(a, "heaplab.db"), "--results", merged)
    check("0 runs added, 4 already there kept" in r.stderr and len(rows(merged)) == CELLS, r.stderr)
    # The next night's shards, another session id: merged alongside.
    for k, d in ((1, a), (2, b)):
        heaplab("run", path, "--results", d, "--shard", f"{k}/2", "--session", "nightly-2", "-q")
        heaplab("results", "merge", os.path.join(d, "heaplab.db"), "--results", merged)
    check(len(rows(merged)) == 2 * CELLS, "the second night's shards")
    bogus = os.path.join(WORK, "bogus.db")
    with open(bogus, "w") as f:
        f.write("not a database\n" * 100)
    r = heaplab("results", "merge", bogus, "--results", merged, expect=2)
    check(r.stderr.startswith("heaplab: error: " + bogus + ": "), r.stderr)


def progress_on_a_terminal():
    """On a terminal: a progress bar with an ETA, redrawn in place."""
    import pty
    res = os.path.join(WORK, "tty")
    master, slave = pty.openpty()
    p = subprocess.Popen([HEAPLAB, "run", experiment("tty"), "--results", res], stdout=subprocess.DEVNULL,
                         stderr=slave)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait()
    os.close(master)
    text = out.decode(errors="replace")
    check(p.returncode == 0, f"tty run exited {p.returncode}: {text[-500:]}")
    check("\r\x1b[K[" in text and "] 0/8 threads on glibc, warm-up 1" in text, "no progress bar: " + repr(text[:400]))
    check(" ETA 0:0" in text and "] 7/8 " in text, "no ETA: " + repr(text[-600:]))
    check("heaplab: run 1/8" not in text, "plain lines on a terminal")


def concurrent():
    res = os.path.join(WORK, "concurrent")
    ps = [subprocess.Popen([HEAPLAB, "run", experiment(n), "--results", res, "-q"], stderr=subprocess.PIPE, text=True)
          for n in ("left", "right")]
    for p in ps:
        err = p.communicate()[1]
        check(p.returncode == 0, f"concurrent run exited {p.returncode}: {err}")
    got = rows(res)
    check(len(got) == 2 * CELLS and len({g[0] for g in got}) == 2, f"{len(got)} runs from two experiments")


def read_only_store():
    """A store another user made, in a directory this user cannot write:
    read as it is, refused for writing in one line that says what to do."""
    ro = os.path.join(WORK, "readonly")
    shutil.copytree(os.path.join(WORK, "one"), ro)
    os.chmod(os.path.join(ro, "heaplab.db"), 0o444)
    for d, _, _ in os.walk(ro):
        os.chmod(d, 0o555)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    if os.geteuid() == 0 and shutil.which("setpriv"):
        run = lambda *a: subprocess.run(nobody + [HEAPLAB, *a], capture_output=True, text=True)
    else:
        run = lambda *a: subprocess.run([HEAPLAB, *a], capture_output=True, text=True)
    r = run("results", "list", "--results", ro)
    check(r.returncode == 0 and "small" in r.stdout, f"a read-only store is not read: {r.stderr}")
    r = run("report", "--results", ro)
    check(r.returncode == 0 and "trace threads" in r.stdout, f"report on a read-only store: {r.stderr}")
    r = run("run", experiment("small"), "--results", ro)
    db = os.path.join(ro, "heaplab.db")
    check(r.returncode == 2 and r.stderr == f"heaplab: error: {db}: the results store cannot be written here (attempt "
          "to write a readonly database): give --results a directory you can write, or copy the store there\n",
          f"run on a read-only store: {r.returncode} {r.stderr!r}")
    # Merged into a store one can write: read through a copy beside it.
    mine = os.path.join(WORK, "mine")
    os.makedirs(mine)
    os.chmod(mine, 0o777)
    heaplab("run", experiment("small"), "--results", mine, "--new", "-q")  # (a store of its own to merge into)
    os.chmod(os.path.join(mine, "heaplab.db"), 0o666)
    r = run("results", "merge", "--results", mine, os.path.join(ro, "heaplab.db"))
    check(r.returncode == 0, f"merge from a read-only store: {r.returncode} {r.stderr!r}")
    check(not [f for f in os.listdir(mine) if ".merge-" in f], f"the copy stayed: {os.listdir(mine)}")
    for d, _, _ in os.walk(ro):
        os.chmod(d, 0o755)
    # With changes still in its write-ahead log, SQLite cannot read it from
    # there: said, never a store without them.
    wal = os.path.join(WORK, "readonly-wal")
    os.makedirs(wal)
    src = os.path.join(WORK, "one", "heaplab.db")
    con = sqlite3.connect(src)
    con.execute("PRAGMA wal_autocheckpoint=0")
    con.execute("INSERT OR REPLACE INTO store_info VALUES ('note', 'in the log')")
    con.commit()
    for suffix in ("", "-wal"):
        shutil.copy(src + suffix, os.path.join(wal, "heaplab.db" + suffix))
    con.close()
    os.chmod(wal, 0o555)
    r = run("results", "list", "--results", wal)
    db = os.path.join(wal, "heaplab.db")
    if os.geteuid() == 0 and shutil.which("setpriv"):
        check(r.returncode == 2 and r.stderr == f"heaplab: error: {db}: cannot read the results store here: its "
              f"write-ahead log ({db}-wal) holds changes that only a writable directory lets SQLite read (another "
              "heaplab writing it, or one that was killed): copy the store and its -wal file to a directory you can "
              "write\n", f"a store with its log: {r.returncode} {r.stderr!r}")
    os.chmod(wal, 0o755)


def hung_allocator():
    path = os.path.join(WORK, "hang.yaml")
    with open(path, "w") as f:
        f.write(f"""name: hang
traces:
  - name: threads
    capture: [{VICTIM}, threads, "2", "2", "3000"]
allocators:
  - glibc
  - {{name: {TEST_ALLOC}, label: hangs, env: {{HEAPLAB_TEST_HANG_AT: "2000"}}}}
repetitions: 1
warmup: 0
timeout: 3
""")
    results = os.path.join(WORK, "hang-results")
    t0 = time.monotonic()
    r = heaplab("run", path, "--results", results, expect=1)
    took = time.monotonic() - t0
    check(took < 60, f"a hung allocator held the experiment up for {took:.0f} s")
    got = {(row[5], row[8]) for row in rows(results)}
    check(got == {("glibc", "ok"), ("hangs", "timeout")}, f"runs stored: {got}")
    check("timeout" in r.stderr, f"the timeout is not reported: {r.stderr[-600:]}")


def attempts(results):
    try:
        db = sqlite3.connect(os.path.join(results, "heaplab.db"), timeout=5)
        got = dict(db.execute("SELECT cell, count FROM attempts").fetchall())
        db.close()
        return got
    except sqlite3.Error:
        return {}


def died_and_resumed():
    """A run that takes its runner down (here: a hung allocator with a long
    timeout, and the runner killed while it hangs) runs last on resume, and
    is stored as failed after the second time."""
    path = os.path.join(WORK, "died.yaml")
    with open(path, "w") as f:
        f.write(f"""name: died
traces:
  - name: threads
    capture: [{VICTIM}, threads, "2", "2", "3000"]
allocators:
  - {{name: {TEST_ALLOC}, label: hangs, env: {{HEAPLAB_TEST_HANG_AT: "2000"}}}}
  - glibc
repetitions: 1
warmup: 0
timeout: 600
""")
    res = os.path.join(WORK, "died-results")

    def run_until_hung(stored, tries, sig=signal.SIGKILL):
        p = subprocess.Popen([HEAPLAB, "run", path, "--results", res], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline and p.poll() is None and not (
                count(res) == stored and list(attempts(res).values()) == [tries]):
            time.sleep(0.05)
        time.sleep(0.5)  # (hung by now: the replay stops at its 2000th call)
        check(p.poll() is None, f"the runner ended: {p.returncode}")
        os.killpg(p.pid, sig)
        err = p.communicate()[1]
        return err, p.returncode

    run_until_hung(0, 1)  # the first run (on "hangs") hangs: killed
    check(count(res) == 0 and list(attempts(res).values()) == [1], f"after the kill: {attempts(res)}")
    # Resumed: glibc first, then "hangs" again; Ctrl-C there is not a death.
    err, code = run_until_hung(1, 2, signal.SIGINT)
    check("1 run(s) were going when an earlier heaplab died: they run last" in err, err)
    check(code == 130, f"interrupted: exit {code}: {err}")
    check({(r[5], r[8]) for r in rows(res)} == {("glibc", "ok")}, f"resumed: {rows(res)}")
    check(list(attempts(res).values()) == [1], f"an interrupt counted as a death: {attempts(res)}")
    run_until_hung(1, 2)  # killed a second time
    r = heaplab("run", path, "--results", res, expect=1)
    check("hangs, rep 1: heaplab died 2 times while this run was going" in r.stderr, r.stderr)
    check({(r[5], r[8]) for r in rows(res)} == {("glibc", "ok"), ("hangs", "runner_died")}, f"stored: {rows(res)}")
    check(attempts(res) == {}, f"attempts left: {attempts(res)}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    bad_files()
    one = complete_run()
    killed_and_resumed()
    interrupted_and_resumed()
    resumed_twice_at_once()
    sharded(one)
    read_only_store()
    progress_on_a_terminal()
    concurrent()
    hung_allocator()
    died_and_resumed()
    changed_trace_on_resume()
    print("PASS")


main()
