// Reading the results store for people and other tools: which session a
// command means, the list of sessions, and exports (CSV of the runs; Google
// Benchmark JSON, so that benchmark's tools/compare.py compares two
// sessions).
#pragma once

#include <string>
#include <vector>

#include "experiments/store.h"

namespace heaplab::experiments {

// A CSV field: quoted (quotes doubled) when it holds a comma, quote or newline.
std::string csv_field(const std::string& s);

// Of a (trace, allocator)'s runs, the one with the median wall time (runs
// without one count as slowest): the run plots and the dashboard show.
// `runs` must not be empty; it is reordered.
const RunRow& median_run(std::vector<const RunRow*>& runs);

// The session `id`, else the newest of `experiment`, else the newest of
// all; throws StoreError naming what is missing.
SessionInfo pick_session(Store& store, const std::string& id, const std::string& experiment);

// One line per session: id, experiment, started, runs stored of all, finished.
std::string sessions_table(const std::vector<SessionInfo>& sessions);

// One row per run: session, cell, trace, allocator, rep, warm-up, exit,
// faithful, then every metric (empty where not measured).
std::string export_csv(Store& store, const std::string& session);

// Google Benchmark's JSON: one benchmark per measured run, named
// "TRACE/ALLOCATOR", real_time = wall_s and cpu_time = cpu_s (in ms),
// every other metric as a user counter.
std::string export_gbench(Store& store, const std::string& session);

}  // namespace heaplab::experiments
