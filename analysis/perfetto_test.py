#!/usr/bin/env python3
"""heaplab export --perfetto, checked against Perfetto's schema with protoc.

  - a captured multi-threaded program (timestamps, thread names) and two
    replay results (--allocator glibc,jemalloc -o: an array) exported; the
    file decoded by `protoc --decode=perfetto.protos.Trace` against
    analysis/perfetto_trace.proto (Perfetto's published messages and field
    numbers): it decodes, has no field the schema does not know, an instant
    per call on its thread's track at the call's recorded time, a track per
    thread with its OS tid and name, live bytes and objects ending where
    `heaplab stats` says, and per result its counters (heap RSS, RSS,
    anonymous memory, live bytes, page footprint, latency percentiles)
  - with HEAPLAB_PERFETTO_PROTO naming Perfetto's whole perfetto_trace.proto,
    the same file decodes to the same text against it
  - a stored trace with a replay's addresses: the decoded text is golden
  - bad input: one line and exit 2

Usage: perfetto_test.py HEAPLAB VICTIM WORKDIR PROTO GOLDEN_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

HEAPLAB, VICTIM, WORK, PROTO, GOLDEN = sys.argv[1:6]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(*args, code=0):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if code is not None and p.returncode != code:
        fail(f"{' '.join(args)}: exit {p.returncode}, wanted {code}\n{p.stdout}\n{p.stderr}")
    return p


def decode(path, proto=PROTO):
    with open(path, "rb") as f:
        p = subprocess.run(["protoc", "--proto_path=" + os.path.dirname(proto), "--decode=perfetto.protos.Trace",
                            proto], stdin=f, capture_output=True)
    check(p.returncode == 0, f"protoc cannot decode {path}: {p.stderr.decode()}")
    text = p.stdout.decode()
    unknown = [line for line in text.splitlines() if re.match(r"^\s*\d+\s*[:{]", line)]
    check(not unknown, f"fields Perfetto's schema does not have: {unknown[:5]}")
    return text


def packets(text):
    """The decoded packets as dicts of their scalar fields (nested names joined by '.')."""
    out, stack, cur = [], [], None
    for line in text.splitlines():
        s = line.strip()
        if s == "packet {" and not stack:
            cur = {"annotations": []}
            stack = ["packet"]
        elif s.endswith("{"):
            stack.append(s[:-1].strip())
            if stack[-1] == "debug_annotations":
                cur["annotations"].append({})
        elif s == "}":
            stack.pop()
            if not stack:
                out.append(cur)
        else:
            key, _, value = s.partition(": ")
            value = value.strip('"') if value.startswith('"') else value
            if stack[-1] == "debug_annotations":
                cur["annotations"][-1][key] = value
            else:
                cur[".".join(stack[1:] + [key])] = value
    return out


shutil.rmtree(WORK, ignore_errors=True)
os.makedirs(WORK)
trace = os.path.join(WORK, "threads.hlt")
run(HEAPLAB, "capture", "-q", "-o", trace, "--", VICTIM, "threads", "2", "2", "400")
results = os.path.join(WORK, "results.json")
run(HEAPLAB, "replay", trace, "--allocator", "glibc,jemalloc", "--latency", "4", "-q", "-o", results)
stats = json.loads(run(HEAPLAB, "stats", "--json", trace).stdout)
events = [json.loads(line) for line in run(HEAPLAB, "cat", "--format", "jsonl", trace).stdout.splitlines()]
meta = json.loads(run(HEAPLAB, "cat", "--meta", trace).stdout)
out = os.path.join(WORK, "threads.pftrace")
p = run(HEAPLAB, "export", "--perfetto", trace, results, "-o", out)
check(re.fullmatch(r"heaplab: wrote .*threads\.pftrace: [\d,]+ calls, [\d,]+ counter values, 2 replay results "
                   r"\(open it at ui\.perfetto\.dev\)\n", p.stderr), p.stderr)

text = decode(out)
pk = packets(text)
check(pk[0].get("sequence_flags") == "1", "the first packet clears the sequence's state")
threads = [x for x in pk if "track_descriptor.thread.tid" in x]
check(len(threads) == stats["threads"], f"a track per thread: {len(threads)} for {stats['threads']}")
pid = str(meta["capture"]["pid"])
check(all(x["track_descriptor.thread.pid"] == pid for x in threads), "threads belong to the program's pid")
tids = {x["track_descriptor.uuid"]: x for x in threads}
instants = [x for x in pk if x.get("track_event.type") == "TYPE_INSTANT"]
check(len(instants) == len(events), f"{len(instants)} instants for {len(events)} calls")
for e, x in zip(events, instants):
    check(int(x["timestamp"]) == e["time"], f"call {e['seq']} at {x['timestamp']}, recorded at {e['time']}")
    check(x["track_event.name"] == e["op"], f"call {e['seq']}: {x['track_event.name']} for {e['op']}")
    check(x["track_event.track_uuid"] in tids, f"call {e['seq']} on no thread's track")
    check(x.get("sequence_flags") == "2", "track events need the sequence's state")
    ann = {a["name"]: a for a in x["annotations"]}
    if "size" in e:
        check(ann["size"]["uint_value"] == str(e["size"]), f"call {e['seq']}: size")
    if e.get("id"):
        check(ann["object"]["uint_value"] == str(e["id"]), f"call {e['seq']}: object")
    if "old" in e:
        check(ann["old object"]["uint_value"] == str(e["old"]), f"call {e['seq']}: old object")
named = {x["track_descriptor.uuid"]: x.get("track_descriptor.name")
         for x in pk if "track_descriptor.uuid" in x}
by_name = {v: k for k, v in named.items()}


def values(name):
    uuid = by_name[name]
    return [(int(x["timestamp"]), float(x.get("track_event.counter_value", x.get("track_event.double_counter_value"))))
            for x in pk if x.get("track_event.type") == "TYPE_COUNTER" and x["track_event.track_uuid"] == uuid]


check(values("live bytes")[-1][1] == stats["live_bytes_at_end"], f"live bytes end {values('live bytes')[-1]}")
check(max(v for _, v in values("live bytes")) == stats["peak_live_bytes"]["bytes"], "live bytes peak")
check(values("live objects")[-1][1] == stats["objects"]["live_at_end"], f"live objects end {values('live objects')[-1]}")
res = json.load(open(results))
for r in res:
    proc = f"replay on {r['allocator']['name']} (preload)"
    check(any(x.get("track_descriptor.process.process_name") == proc for x in pk), f"no process {proc}")
    tl = r["replay"]["memory"]["timeline"]
    heap = values(proc + ": heap RSS")
    check([v for _, v in heap] == [k * 1024.0 for k in tl["heap_kib"]], f"{proc}: heap RSS values")
    check([t for t, _ in heap] == [round(ms * 1e6) for ms in tl["t_ms"]], f"{proc}: heap RSS times")
    fp = values(proc + ": page footprint")
    check(fp[-1][1] == r["replay"]["memory"]["footprint"]["at_end"]["pages"] * 4096.0, f"{proc}: footprint at end")
    p99 = values(proc + ": malloc latency p99")
    check([v for _, v in p99] == [r["replay"]["latency"]["ops"]["malloc"]["p99_ns"]] * 2, f"{proc}: malloc p99")

# --limit: the counters end where the calls do, with the values then.
lim = os.path.join(WORK, "limit.pftrace")
run(HEAPLAB, "export", "--perfetto", trace, "-n", "100", "-o", lim)
lp = packets(decode(lim))
check(len([x for x in lp if x.get("track_event.type") == "TYPE_INSTANT"]) == 100, "-n 100: 100 calls")
live, size = 0, {}
for e in events[:100]:
    if e.get("old") and not e.get("failed") and e["old"] in size:
        live -= size.pop(e["old"])
    if e.get("id"):
        size[e["id"]] = e.get("size", 0) * max(1, e.get("count", 1))
        live += size[e["id"]]
last = [x for x in lp if x.get("track_event.type") == "TYPE_COUNTER"
        and x["track_event.track_uuid"] == "2"][-1]
check(int(last["track_event.counter_value"]) == live and int(last["timestamp"]) == events[99]["time"],
      f"-n 100: live bytes {last} for {live} at {events[99]['time']}")

# An --allocator all array with an allocator skipped: left out, and said.
arr = os.path.join(WORK, "with-skipped.json")
json.dump(res + [{"allocator": {"name": "nosuch"}, "skipped": "not installed"}], open(arr, "w"))
p = run(HEAPLAB, "export", "--perfetto", trace, arr, "-o", lim)
check(f"heaplab: note: {arr}[2]: the replay on nosuch was skipped: left out\n" in p.stderr, p.stderr)
check(", 2 replay results" in p.stderr, p.stderr)

# Perfetto's whole schema, where given: the same decoding.
whole = os.environ.get("HEAPLAB_PERFETTO_PROTO", "")
if whole:
    check(decode(out, whole) == text, "the whole schema decodes the file differently")
    print("checked against " + whole)

# Golden: a stored trace with a replay's addresses (and no clock).
stored = os.path.join(GOLDEN, "401.bzip2-glibc.hlt")
gold = os.path.join(WORK, "401.bzip2-glibc.pftrace")
run(HEAPLAB, "export", "--perfetto", stored, "-o", gold)
want = open(os.path.join(GOLDEN, "401.bzip2-glibc.perfetto.txt")).read()
got = decode(gold)
if got != want:
    open(os.path.join(WORK, "got.txt"), "w").write(got)
    fail("decoded golden differs: diff " + os.path.join(WORK, "got.txt") + " " +
         os.path.join(GOLDEN, "401.bzip2-glibc.perfetto.txt"))
check(len([x for x in packets(got) if x.get("track_event.type") == "TYPE_INSTANT"]) == 53, "53 calls")
check("pointer_value" in got, "addresses as pointers")
# --from and --limit
run(HEAPLAB, "export", "--perfetto", stored, "--from", "10", "-n", "5", "-o", gold)
sub = [x for x in packets(decode(gold)) if x.get("track_event.type") == "TYPE_INSTANT"]
check([int(x["timestamp"]) for x in sub] == [10000, 11000, 12000, 13000, 14000], "--from 10 -n 5")

# Bad input: one line, exit 2, nothing written.
bad = os.path.join(WORK, "bad.pftrace")


def one_line(args, want):
    p = run(HEAPLAB, *args, code=2)
    check(p.stderr == "heaplab: error: " + want + "\n", f"{args}: {p.stderr!r}")
    check(not os.path.exists(bad), f"{args}: wrote {bad}")


one_line(["export", trace, "-o", bad], "export: say which format: --perfetto (the only one so far)")
notjson = os.path.join(WORK, "x.json")
open(notjson, "w").write("{not json")
one_line(["export", "--perfetto", trace, notjson, "-o", bad],
         f"export: {notjson}: not JSON (give replay results: heaplab replay -o)")
failed = os.path.join(WORK, "failed.json")
json.dump({"exit": {"status": "crashed", "signal": 11}, "allocator": {"name": "x"}}, open(failed, "w"))
one_line(["export", "--perfetto", trace, failed, "-o", bad],
         f'export: {failed}: not a replay result: the replay failed ({{"signal":11,"status":"crashed"}}), so it has '
         "no figures")
nomem = os.path.join(WORK, "nomem.json")
run(HEAPLAB, "replay", trace, "--no-memory", "-q", "-o", nomem)
one_line(["export", "--perfetto", trace, nomem, "-o", bad],
         f"export: {nomem}: not a replay result: no memory timeline (replayed with --no-memory?)")
wrongtype = os.path.join(WORK, "wrongtype.json")
w = json.load(open(results))[0]
w["replay"]["memory"]["footprint"]["page_size"] = "big"
json.dump(w, open(wrongtype, "w"))
p = run(HEAPLAB, "export", "--perfetto", trace, wrongtype, "-o", bad, code=2)
check(p.stderr.startswith(f"heaplab: error: export: {wrongtype}: not a replay result: ") and p.stderr.count("\n") == 1,
      p.stderr)
check(not os.path.exists(bad), "a bad result wrote the output")
one_line(["export", "--perfetto", os.path.join(WORK, "none.hlt"), "-o", bad],
         f"{os.path.join(WORK, 'none.hlt')}: cannot open: No such file or directory")
print("ok")
