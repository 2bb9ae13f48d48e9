#!/usr/bin/env python3
"""`heaplab dashboard` in a real browser: headless Chromium (Debian's
`chromium`) loads the page from disk with the network off.

A store gets four sessions of a small experiment (3 runs each of glibc and
jemalloc on a captured victim trace). Their heap peaks are then planted:
glibc's 10 MiB in every run, jemalloc's 12 MiB and in the newest session 18
(+50%). The real figures of so short a replay wander by 10% and more from
session to session (the peak is the highest of a few samples), which made a
test on them flaky; everything else on the page stays real. The test checks that the page rendered (the script ran:
one history chart per metric card, the drill-down charts), that the planted
regression is flagged on the heap-peak card for jemalloc and listed at the
top and by `heaplab dashboard` itself, and that glibc's heap peak is not;
it saves a screenshot next to the page. Twelve older sessions (copies) make
a history long enough for change points: glibc's heap peak steps from 10 to
11 MiB at the seventh session, found (E-divisive means), named with its
session by `heaplab dashboard`, and marked on the card and at the top. A newer session without jemalloc
then leaves jemalloc's series unjudged ("not in the newest session").

Usage: dashboard_test.py HEAPLAB VICTIM WORKDIR
"""
import os
import re
import shutil
import sqlite3
import subprocess
import sys

HEAPLAB, VICTIM, WORK = sys.argv[1], sys.argv[2], sys.argv[3]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-800:]}")
    return r


def main():
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        fail("chromium is not installed (scripts/bootstrap.sh installs it)")
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    trace = os.path.join(WORK, "threads.hlt")
    # Long enough (about 0.5 s at the recorded pace, sampled every ms) for a
    # heap timeline of hundreds of points per allocator in the drill-down.
    run(HEAPLAB, "capture", "-q", "-o", trace, "--", VICTIM, "threads", "2", "2", "600000")
    exp = os.path.join(WORK, "nightly.yaml")
    with open(exp, "w") as f:
        f.write(f"""name: nightly
traces: [{{name: threads, file: {trace}}}]
allocators: [glibc, {{name: jemalloc, label: je}}]
replay: {{latency: 8, sample_ms: 1}}
repetitions: 3
warmup: 0
""")
    results = os.path.join(WORK, "results")
    for _ in range(4):
        run(HEAPLAB, "run", exp, "--results", results, "-q")
    db = sqlite3.connect(os.path.join(results, "heaplab.db"))
    # A longer history: 12 older sessions, copies of the four (the
    # drill-downs and every other figure stay real).
    real = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY started, id")]
    scols = [r[1] for r in db.execute("PRAGMA table_info(sessions)")]
    rcols = [r[1] for r in db.execute("PRAGMA table_info(runs)")]
    for k in range(12):
        new, when = f"old{k:02d}", f"2026-01-{k + 1:02d}T00:00:00Z"
        pick = ["?" if c in ("id", "started", "finished") else c for c in scols]
        db.execute(f"INSERT INTO sessions ({','.join(scols)}) SELECT {','.join(pick)} FROM sessions WHERE id = ?",
                   [{"id": new, "started": when, "finished": when}[c] for c in scols if c in ("id", "started", "finished")]
                   + [real[k % 4]])
        pick = ["?" if c == "session" else c for c in rcols]
        db.execute(f"INSERT INTO runs ({','.join(rcols)}) SELECT {','.join(pick)} FROM runs WHERE session = ?",
                   (new, real[k % 4]))
    order = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY started, id")]
    newest = order[-1]
    db.execute("UPDATE runs SET heap_peak_mib = CASE allocator WHEN 'glibc' THEN 11.0 ELSE 12.0 END")
    # glibc's heap peak steps up by 10% from the seventh session on (before:
    # 10 MiB): a change point, a regression, but long past (the newest
    # session is within its band).
    db.executemany("UPDATE runs SET heap_peak_mib = 10.0 WHERE session = ? AND allocator = 'glibc'",
                   [(sid,) for sid in order[:6]])
    n = db.execute("UPDATE runs SET heap_peak_mib = 18.0 WHERE session = ? AND allocator = 'je'", (newest,)).rowcount
    db.commit()
    db.close()
    if n != 3:
        fail(f"planted {n} runs")
    site = os.path.join(WORK, "site")
    out = run(HEAPLAB, "dashboard", "--results", results, "-o", site).stdout
    if "regression: nightly/threads/heap_peak_mib/je: +50.0%" not in out:
        fail("heaplab dashboard did not list the planted regression:\n" + out)
    if "regression: nightly/threads/heap_peak_mib/glibc" in out:
        fail("glibc's heap peak flagged:\n" + out)
    step = f"change point: nightly/threads/heap_peak_mib/glibc: +10.0% (regression) from session {order[6]} (2026-01-07"
    if step not in out:
        fail("heaplab dashboard did not list glibc's step (" + step + "):\n" + out)
    if out.count("change point:") != 1:
        fail("change points where there is no step:\n" + out)
    page = os.path.join(site, "index.html")
    flags = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
             "--disable-extensions", "--proxy-server=127.0.0.1:9", "--user-data-dir=" + os.path.join(WORK, "profile")]
    dom = subprocess.run([browser, *flags, "--dump-dom", "file://" + page], capture_output=True, text=True,
                         timeout=120).stdout
    if 'data-rendered="yes"' not in dom:
        fail("the page's script did not finish:\n" + dom[:2000])
    cards = dom.count('class="card metric"')
    charts = dom.count('class="chart history')
    if cards < 10 or charts != cards:
        fail(f"{cards} metric cards, {charts} history charts")
    # Drawn by Chart.js on canvases: each says how many points its data sets
    # have and whether pixels were painted.
    canvases = re.findall(r'<canvas class="chart ([a-z-]+)"[^>]*>', dom)
    points = sum(int(p) for p in re.findall(r'<canvas class="chart history"[^>]*data-points="(\d+)"', dom))
    if points < cards * 2 * 4:
        fail(f"charts without their points ({points} points in {cards} history charts)")
    undrawn = [c for c in re.findall(r'<canvas class="chart [^"]*"[^>]*>', dom) if 'data-drawn="yes"' not in c]
    if undrawn:
        fail(f"{len(undrawn)} of {len(canvases)} charts not painted: {undrawn[:2]}")
    for cls in ("chart drill-rss", "chart drill-latency"):
        if cls not in dom:
            fail(f"no {cls} chart in the drill-down")
    # The drill-down's heap timeline: at least 100 points per allocator.
    each = re.search(r'<canvas class="chart drill-rss"[^>]*data-points-each="([^"]*)"', dom)
    if not each:
        fail("the drill-down heap chart does not say its points per data set")
    counts = dict(x.rsplit(":", 1) for x in each.group(1).split(","))
    for alloc in ("glibc", "je"):
        if int(counts.get(alloc, 0)) < 100:
            fail(f"the drill-down heap chart has {counts.get(alloc, 0)} points for {alloc}, fewer than 100: {counts}")
    card = re.search(r'<div class="card metric" data-metric="heap_peak_mib">(.*?)<div class="card metric"', dom, re.S)
    if not card:
        fail("no heap-peak card")
    if '<span class="verdict regression" data-allocator="je">je: regression +50.0%</span>' not in card.group(1):
        fail("the planted regression is not flagged on the heap-peak card:\n" + card.group(1)[:1500])
    if 'class="verdict regression" data-allocator="glibc"' in card.group(1):
        fail("glibc flagged on the heap-peak card")
    if not re.search(r'<li class="regression">regression: nightly / threads / heap peak / je: ', dom):
        fail("the planted regression is not in the list at the top")
    if not re.search(r'<div class="change regression" data-allocator="glibc">glibc: step \+10.0% \(regression\): '
                     r'10.00 -&gt; 11.00 from session ' + order[6], card.group(1)):
        fail("glibc's step is not on the heap-peak card:\n" + card.group(1)[:1500])
    if not re.search(r'<li class="change regression">change point: nightly / threads / heap peak / glibc: ', dom):
        fail("glibc's step is not in the list at the top")
    shot = os.path.join(site, "screenshot.png")
    subprocess.run([browser, *flags, "--window-size=1400,2400", "--screenshot=" + shot, "file://" + page],
                   capture_output=True, timeout=120)
    with open(shot, "rb") as f:
        head = f.read(8)
    if head != b"\x89PNG\r\n\x1a\n" or os.path.getsize(shot) < 20000:
        fail("no screenshot")
    # A newer session without jemalloc: its old regression is no longer
    # the newest figure and must not be flagged.
    with open(exp, "w") as f:
        f.write(f"""name: nightly
traces: [{{name: threads, file: {trace}}}]
allocators: [glibc]
repetitions: 3
warmup: 0
""")
    run(HEAPLAB, "run", exp, "--results", results, "-q")
    out = run(HEAPLAB, "dashboard", "--results", results, "-o", site).stdout
    if "/je:" in out:
        fail("a regression of an allocator the newest session did not run:\n" + out)
    with open(page) as f:
        if '"state":"absent"' not in f.read():
            fail("jemalloc's series not marked absent from the newest session")
    # The report's plots page: drawn by the same Chart.js and helpers.
    plots = os.path.join(WORK, "plots")
    run(HEAPLAB, "report", "--results", results, "--plots", plots, "--metric", "wall_s", "--metric", "heap_peak_mib")
    pdom = subprocess.run([browser, *flags, "--dump-dom", "file://" + os.path.join(plots, "index.html")],
                          capture_output=True, text=True, timeout=120).stdout
    if 'data-rendered="yes"' not in pdom:
        fail("the plots page's script did not finish:\n" + pdom[:2000])
    pcharts = re.findall(r'<canvas class="chart [^"]*"[^>]*>', pdom)
    if len(pcharts) != 3 or any('data-drawn="yes"' not in c for c in pcharts):
        fail(f"plots page: {len(pcharts)} charts, expected 3 painted (heap, wall_s, heap_peak_mib): {pcharts}")
    print(f"PASS ({cards} charts; screenshot {shot}; plots page {len(pcharts)} charts)")


main()
