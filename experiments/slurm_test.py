#!/usr/bin/env python3
"""`heaplab run --slurm` on a real Slurm: a single-node cluster from Debian's
packages (munged, slurmctld, slurmd) started in a scratch directory (its own
munge key and socket, its own ports, everything in files under WORKDIR),
an experiment submitted as a job array of 2 shards and a merge job, waited
for, and the merged store compared with a one-piece run of the same file:
the same cells, traces, allocators, repetitions and outcomes, one session,
finished. Also: a trace to capture refused, and sbatch missing named.

Skips (exit 77) with the reason only where Slurm cannot start here: not
installed, not root, or the daemons do not come up (their logs' tails are
printed).

A second submission, with an allocator that crashes, must end non-zero
(the merge job fails when a shard's runs failed) with the failed runs stored.

Usage: slurm_test.py HEAPLAB VICTIM WORKDIR TEST_ALLOC_NULL
"""
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time

HEAPLAB, VICTIM, WORK, TEST_ALLOC = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
SKIP = 77
NODE = "heaplabtest"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(SKIP)


def check(cond, msg):
    if not cond:
        fail(msg)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rows(results):
    db = sqlite3.connect(os.path.join(results, "heaplab.db"))
    out = db.execute("SELECT session, cell, seq, trace, trace_id, allocator, rep, warmup, exit, faithful FROM runs "
                     "ORDER BY seq").fetchall()
    sessions = db.execute("SELECT id, finished FROM sessions").fetchall()
    db.close()
    return out, sessions


tools = ["munged", "mungekey", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol"]
missing = [t for t in tools if not shutil.which(t)]
if missing:
    skip(f"{', '.join(missing)} not installed (apt-get install slurmctld slurmd slurm-client munge; "
         "scripts/bootstrap.sh installs them)")
if os.geteuid() != 0:
    skip("slurmd runs jobs as root here; run the test as root")

shutil.rmtree(WORK, ignore_errors=True)
S = os.path.join(WORK, "slurm")
for d in ("munge", "state", "spool", "log", "run"):
    os.makedirs(os.path.join(S, d))
os.chmod(os.path.join(S, "munge"), 0o755)
conf = os.path.join(S, "slurm.conf")
with open(os.path.join(S, "plugstack.conf"), "w"):
    pass
with open(conf, "w") as f:
    f.write(f"""ClusterName=heaplabtest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={S}/munge/munge.sock
StateSaveLocation={S}/state
SlurmdSpoolDir={S}/spool
SlurmctldPidFile={S}/run/slurmctld.pid
SlurmdPidFile={S}/run/slurmd.pid
SlurmctldLogFile={S}/log/slurmctld.log
SlurmdLogFile={S}/log/slurmd.log
PlugStackConfig={S}/plugstack.conf
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerParameters=batch_sched_delay=0
DependencyParameters=kill_invalid_depend
MpiDefault=none
ReturnToService=2
MinJobAge=300
NodeName={NODE} NodeAddr=127.0.0.1 CPUs={os.cpu_count() or 1} RealMemory=1000 State=UNKNOWN
PartitionName=heaplab Nodes={NODE} Default=YES MaxTime=INFINITE State=UP
""")
env = dict(os.environ, SLURM_CONF=conf)
daemons = []


def stop():
    subprocess.run(["scontrol", "shutdown"], env=env, capture_output=True, timeout=30)
    for p in reversed(daemons):
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def log_tails():
    out = ""
    for name in ("munged.log", "slurmctld.log", "slurmd.log"):
        path = os.path.join(S, "log", name)
        if os.path.exists(path):
            out += f"--- {name}\n" + "".join(open(path).readlines()[-8:])
    return out


t0 = time.monotonic()
try:
    key = os.path.join(S, "munge", "munge.key")
    subprocess.run(["mungekey", "-c", "-k", key], check=True, capture_output=True)
    os.chmod(key, 0o400)
    daemons.append(subprocess.Popen(
        ["munged", "-F", f"--key-file={key}", f"--socket={S}/munge/munge.sock", f"--pid-file={S}/run/munged.pid",
         f"--log-file={S}/log/munged.log", f"--seed-file={S}/munge/munged.seed"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for _ in range(100):
        if os.path.exists(f"{S}/munge/munge.sock"):
            break
        time.sleep(0.05)
    daemons.append(subprocess.Popen(["slurmctld", "-D", "-f", conf], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL))
    daemons.append(subprocess.Popen(["slurmd", "-D", "-f", conf, "-N", NODE], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL))
    state = ""
    for _ in range(300):
        r = subprocess.run(["sinfo", "-h", "-n", NODE, "-o", "%T"], env=env, capture_output=True, text=True)
        state = r.stdout.strip()
        if state == "idle":
            break
        if any(p.poll() is not None for p in daemons):
            break
        time.sleep(0.1)
    if state != "idle":
        tails = log_tails()
        stop()
        skip(f"the single-node Slurm did not come up here (node state '{state}'):\n{tails}")
    started = time.monotonic() - t0

    # The experiment: a captured victim, two allocators, a warm-up and two
    # measured rounds (6 runs); shards need a trace file.
    trace = os.path.join(WORK, "threads.hlt")
    subprocess.run([HEAPLAB, "capture", "-q", "-o", trace, "--", VICTIM, "threads", "2", "2", "3000"], check=True,
                   capture_output=True)
    exp = os.path.join(WORK, "sharded.yaml")
    with open(exp, "w") as f:
        f.write(f"""name: sharded
traces: [{{name: threads, file: {trace}}}]
allocators: [glibc, jemalloc]
repetitions: 2
warmup: 1
""")
    one = os.path.join(WORK, "one")
    r = subprocess.run([HEAPLAB, "run", exp, "--results", one, "-q"], capture_output=True, text=True)
    check(r.returncode == 0, f"the one-piece run exited {r.returncode}: {r.stderr[-800:]}")

    merged = os.path.join(WORK, "merged")
    t1 = time.monotonic()
    r = subprocess.run([HEAPLAB, "run", exp, "--slurm", "2", "--wait", "--results", merged, "--session", "slurm-1"],
                       env=env, capture_output=True, text=True, timeout=600)
    jobs = time.monotonic() - t1
    check(r.returncode == 0, f"heaplab run --slurm 2 --wait exited {r.returncode}:\n{r.stdout}\n{r.stderr}\n"
          + log_tails())
    check("heaplab: submitted job array " in r.stderr and "and merge job " in r.stderr, r.stderr)
    check("experiment sharded (session slurm-1, 6 of 6 runs)" in r.stdout, "no report of the merged session:\n"
          + r.stdout)
    got, sessions = rows(merged)
    want, _ = rows(one)
    key = lambda g: (g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9])
    check(len(got) == 6 and [key(g) for g in got] == [key(g) for g in want],
          f"the merged store differs from a one-piece run:\n{got}\n{want}")
    check(len(sessions) == 1 and sessions[0][0] == "slurm-1" and sessions[0][1], f"merged sessions: {sessions}")
    jobdir = os.path.join(merged, "slurm", "slurm-1")
    for f in ("shards.sbatch", "merge.sbatch", "shard-1.log", "shard-2.log", "merge.log",
              "shard-1/heaplab.db", "shard-2/heaplab.db"):
        check(os.path.exists(os.path.join(jobdir, f)), f"{f} not kept in {jobdir}")

    # An allocator that crashes: its runs are stored as failed, and the
    # merge job (so heaplab run --wait) ends with exit 1.
    bad = os.path.join(WORK, "crashing.yaml")
    with open(bad, "w") as f:
        f.write(f"""name: crashing
traces: [{{name: threads, file: {trace}}}]
allocators: [glibc, {{name: {TEST_ALLOC}, label: crashy, env: {{HEAPLAB_TEST_ABORT_AT: "5"}}}}]
repetitions: 1
warmup: 0
""")
    r = subprocess.run([HEAPLAB, "run", bad, "--slurm", "2", "--wait", "--results", merged, "--session", "slurm-2"],
                       env=env, capture_output=True, text=True, timeout=600)
    check(r.returncode == 1, f"a crashing allocator under --slurm --wait: exit {r.returncode}, not 1:\n{r.stderr}")
    check("the merge job " in r.stderr and "ended with exit 1" in r.stderr, r.stderr)
    db = sqlite3.connect(os.path.join(merged, "heaplab.db"))
    exits = sorted(x[0] for x in db.execute("SELECT exit FROM runs WHERE session = 'slurm-2'"))
    db.close()
    check(exits == ["crashed", "ok"], f"the crashing session's runs: {exits}")

    # Submitting the same session again, a trace to capture, sbatch missing:
    # one line each, exit 2.
    r = subprocess.run([HEAPLAB, "run", exp, "--slurm", "2", "--results", merged, "--session", "slurm-1"], env=env,
                       capture_output=True, text=True)
    check(r.returncode == 2 and "was submitted before (give another --session)" in r.stderr, r.stderr)
    cap = os.path.join(WORK, "capture.yaml")
    with open(cap, "w") as f:
        f.write(f"name: cap\ntraces: [{{name: t, capture: [{VICTIM}, single]}}]\nallocators: [glibc]\n")
    r = subprocess.run([HEAPLAB, "run", cap, "--slurm", "2", "--results", merged], env=env, capture_output=True,
                       text=True)
    check(r.returncode == 2 and "--slurm needs trace files" in r.stderr and r.stderr.count("\n") == 1, r.stderr)
    r = subprocess.run([HEAPLAB, "run", exp, "--slurm", "2", "--results", os.path.join(WORK, "nosbatch")],
                       env=dict(env, PATH="/nonexistent"), capture_output=True, text=True)
    check(r.returncode == 2 and "cannot run 'sbatch'" in r.stderr and "slurm-client" in r.stderr, r.stderr)
finally:
    stop()
print(f"PASS (Slurm up in {started:.1f} s; job array of 2 shards and the merge job in {jobs:.1f} s)")
