#include "experiments/spec.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/files.h"
#include "common/text.h"
#include "experiments/metrics.h"

namespace heaplab::experiments {

namespace {

// A value of the user's file, quoted, at most 80 characters of it (a junk
// line of 10 MB is not echoed whole).
std::string q(const std::string& v) { return common::excerpt(v, 80); }

struct Ctx {
  std::string path;
  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const {
    throw SpecError(path + ":" + std::to_string(at.Mark().line + 1) + ": " + what);
  }
  [[noreturn]] void fail_line(int line, const std::string& what) const {
    throw SpecError(path + ":" + std::to_string(line + 1) + ": " + what);
  }
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Every key of map `m` must be in `known`.
void check_keys(const Ctx& c, const YAML::Node& m, const std::string& where, const std::vector<std::string>& known) {
  for (const auto& kv : m) {
    const std::string k = kv.first.Scalar();
    if (std::find(known.begin(), known.end(), k) == known.end())
      c.fail(kv.first, "unknown key " + q(k) + (where.empty() ? "" : " in " + where) + " (known: " + join(known) + ")");
  }
}

// A key given twice in one map (YAML forbids it; yaml-cpp keeps both and
// the first would win silently), anywhere in the file.
void check_duplicates(const Ctx& c, const YAML::Node& n, int depth, uint64_t& visited) {
  if (depth > 64) c.fail(n, "nested too deeply");
  // (Aliases make a tree of shared nodes: bounded, a "billion laughs" file stops here.)
  if (++visited > 1000000) c.fail(n, "too many values (aliases repeated over and over?)");
  if (n.IsSequence())
    for (const auto& item : n) check_duplicates(c, item, depth + 1, visited);
  if (!n.IsMap()) return;
  std::map<std::string, int> seen;  // key -> its line
  for (const auto& kv : n) {
    if (kv.first.IsScalar()) {
      const auto [it, fresh] = seen.emplace(kv.first.Scalar(), kv.first.Mark().line);
      if (!fresh)
        c.fail(kv.first,
               "duplicate key " + q(kv.first.Scalar()) + " (first at line " + std::to_string(it->second + 1) + ")");
    }
    check_duplicates(c, kv.second, depth + 1, visited);
  }
}

std::string what_is(const YAML::Node& n) {
  if (n.IsMap()) return "a map";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return q(n.Scalar());
}

std::string text(const Ctx& c, const YAML::Node& n, const std::string& key) {
  if (!n.IsScalar()) c.fail(n, "'" + key + "': expected text, not " + what_is(n));
  return n.Scalar();
}

uint64_t integer(const Ctx& c, const YAML::Node& n, const std::string& key, uint64_t lo, uint64_t hi) {
  const std::string s = n.IsScalar() ? n.Scalar() : "";
  char* end = nullptr;
  const unsigned long long v = s.empty() || s[0] == '-' ? 0 : std::strtoull(s.c_str(), &end, 10);
  if (!n.IsScalar() || s.empty() || s[0] == '-' || !end || *end || v < lo || v > hi)
    c.fail(n, "'" + key + "': expected a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                  ", not " + what_is(n));
  return v;
}

std::string one_of(const Ctx& c, const YAML::Node& n, const std::string& key, const std::vector<std::string>& ok) {
  std::string v = text(c, n, key);
  if (std::find(ok.begin(), ok.end(), v) == ok.end())
    c.fail(n, "'" + key + "': expected one of " + join(ok) + ", not " + q(v));
  return v;
}

YAML::Node need_map(const Ctx& c, const YAML::Node& n, const std::string& key) {
  if (!n.IsMap()) c.fail(n, "'" + key + "': expected a map of keys and values, not " + what_is(n));
  return n;
}

YAML::Node need_list(const Ctx& c, const YAML::Node& n, const std::string& key) {
  if (!n.IsSequence()) c.fail(n, "'" + key + "': expected a list, not " + what_is(n));
  return n;
}

bool plain_name(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-' || ch == '/';
  });
}

}  // namespace

ExperimentSpec parse_experiment(const std::string& src, const std::string& path) {
  const Ctx c{path};
  YAML::Node root;
  try {
    root = YAML::Load(src);
  } catch (const YAML::Exception& e) {
    c.fail_line(e.mark.line, "not valid YAML: " + e.msg);
  }
  if (!root.IsMap()) c.fail_line(0, "expected a map of keys (name, traces, allocators, ...), not " + what_is(root));
  uint64_t visited = 0;
  check_duplicates(c, root, 0, visited);
  check_keys(c, root, "",
             {"name", "description", "traces", "allocators", "replay", "metrics", "repetitions", "warmup", "baseline",
              "timeout"});
  ExperimentSpec s;
  s.path = path;
  s.text = src;
  if (root["name"]) {
    s.name = text(c, root["name"], "name");
    if (!plain_name(s.name) || s.name.find('/') != std::string::npos)
      c.fail(root["name"], "'name': letters, digits, '.', '_' and '-' only, not " + q(s.name));
  } else {
    std::string base = path.substr(path.find_last_of('/') + 1);
    if (base.size() > 5 && base.substr(base.size() - 5) == ".yaml")
      base.resize(base.size() - 5);
    else if (base.size() > 4 && base.substr(base.size() - 4) == ".yml")
      base.resize(base.size() - 4);
    s.name = base;
  }
  if (root["description"]) s.description = text(c, root["description"], "description");

  if (!root["traces"]) c.fail_line(0, "no 'traces' (a list of trace files or programs to capture)");
  for (const YAML::Node& t : need_list(c, root["traces"], "traces")) {
    need_map(c, t, "traces");
    check_keys(c, t, "a trace", {"name", "file", "capture", "capture_allocator"});
    TraceSpec ts;
    if (!t["name"]) c.fail(t, "a trace without 'name'");
    ts.name = text(c, t["name"], "name");
    if (!plain_name(ts.name) || ts.name.find('/') != std::string::npos)
      c.fail(t["name"], "'name': letters, digits, '.', '_' and '-' only, not " + q(ts.name));
    for (const TraceSpec& o : s.traces)
      if (o.name == ts.name) c.fail(t["name"], "trace " + q(ts.name) + " named twice");
    if (bool(t["file"]) == bool(t["capture"]))
      c.fail(t, "trace " + q(ts.name) + ": give either 'file' or 'capture', one of them");
    if (t["file"]) ts.file = text(c, t["file"], "file");
    if (t["capture"]) {
      for (const YAML::Node& a : need_list(c, t["capture"], "capture")) ts.capture.push_back(text(c, a, "capture"));
      if (ts.capture.empty()) c.fail(t["capture"], "'capture': an empty program");
    }
    if (t["capture_allocator"]) {
      if (!t["capture"]) c.fail(t["capture_allocator"], "'capture_allocator' without 'capture'");
      ts.capture_allocator = text(c, t["capture_allocator"], "capture_allocator");
    }
    s.traces.push_back(ts);
  }
  if (s.traces.empty()) c.fail(root["traces"], "'traces': no trace given");

  // {experiment_dir}: where the experiment file is (in trace files and
  // programs, allocators' paths and their environment's values).
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  const auto expand = [&](std::string& v) {
    // Searched from after each replacement: a directory named with the
    // placeholder itself is not expanded again (forever).
    for (size_t at = 0; (at = v.find("{experiment_dir}", at)) != std::string::npos; at += dir.size())
      v.replace(at, 16, dir);
  };

  if (!root["allocators"]) c.fail_line(0, "no 'allocators' (a list of allocators to replay on)");
  for (const YAML::Node& a : need_list(c, root["allocators"], "allocators")) {
    AllocatorSpec as;
    if (a.IsScalar()) {  // "- jemalloc" for short
      as.name = a.Scalar();
    } else {
      need_map(c, a, "allocators");
      check_keys(c, a, "an allocator", {"name", "load", "env", "label"});
      if (!a["name"]) c.fail(a, "an allocator without 'name'");
      as.name = text(c, a["name"], "name");
      if (a["load"]) as.load = one_of(c, a["load"], "load", {"preload", "direct"});
      if (a["env"]) {
        for (const auto& kv : need_map(c, a["env"], "env")) {
          const std::string k = kv.first.Scalar();
          if (k.empty() || k.find('=') != std::string::npos) c.fail(kv.first, "'env': not a variable name: " + q(k));
          as.env.emplace_back(k, text(c, kv.second, k));
        }
      }
      if (a["label"]) {
        as.label = text(c, a["label"], "label");
        if (!plain_name(as.label)) c.fail(a["label"], "'label': letters, digits, '.', '_', '-' and '/' only");
      }
    }
    if (as.name.empty()) c.fail(a, "an allocator with an empty name");
    expand(as.name);
    for (auto& kv : as.env) expand(kv.second);
    if (as.label.empty()) {
      as.label = as.name.find('/') != std::string::npos ? as.name.substr(as.name.find_last_of('/') + 1) : as.name;
      if (as.load == "direct") as.label += "/direct";
      if (!plain_name(as.label))  // a path ending in '/', or characters a label may not have
        c.fail(a,
               "cannot make a label of " + q(as.name) + " (give it a 'label': letters, digits, '.', '_', '-' and '/')");
    }
    for (const AllocatorSpec& o : s.allocators)
      if (o.label == as.label) c.fail(a, "two allocators labelled " + q(as.label) + " (give each a 'label')");
    s.allocators.push_back(as);
  }
  if (s.allocators.empty()) c.fail(root["allocators"], "'allocators': no allocator given");
  for (TraceSpec& t : s.traces) {
    expand(t.file);
    for (std::string& a : t.capture) expand(a);
  }

  // Experiments measure memory: by default they replay at the recorded pace
  // (time-based purging then happens as in the program; at full speed
  // jemalloc's and mimalloc's peaks were off by up to 10%) and write the
  // pages the program had resident (--touch recorded, the replay's default).
  s.replay.timing = replay::Timing::recorded;
  if (root["replay"]) {
    const YAML::Node r = need_map(c, root["replay"], "replay");
    // The keys, their choices and ranges: replay/settings.h's table.
    std::vector<std::string> keys;
    for (const replay::SettingInfo& i : replay::setting_table())
      if (i.kind != replay::SettingKind::flag) keys.push_back(i.key);
    check_keys(c, r, "replay", keys);
    for (const replay::SettingInfo& i : replay::setting_table()) {
      if (i.kind == replay::SettingKind::flag || !r[i.key]) continue;
      const YAML::Node n = r[i.key];
      std::string v = i.kind == replay::SettingKind::choice  ? one_of(c, n, i.key, i.choices)
                      : i.kind == replay::SettingKind::count ? std::to_string(integer(c, n, i.key, i.min, i.max))
                                                             : text(c, n, i.key);
      if (std::string why = replay::set_setting(s.replay, i, v); !why.empty())
        c.fail(n, "'" + std::string(i.key) + "': " + why);
    }
    if (s.replay.membind == "local" && s.replay.pin == "none")
      c.fail(r["membind"], "'membind': local binds memory to the pinned CPUs' nodes; give 'pin' too");
    if (r["speed"] && s.replay.timing != replay::Timing::recorded)
      c.fail(r["speed"],
             "'speed' paces a replay at the recorded pace, and this one has 'timing: fast' (which runs as fast as it "
             "can)");
  }
  if (root["metrics"]) {
    for (const YAML::Node& m : need_list(c, root["metrics"], "metrics")) {
      const std::string name = text(c, m, "metrics");
      if (!find_metric(name)) {
        std::vector<std::string> known;
        for (const Metric& k : all_metrics()) known.push_back(k.name);
        c.fail(m, "'metrics': unknown metric " + q(name) + " (known: " + join(known) + ")");
      }
      s.metrics.push_back(name);
    }
  }
  if (root["repetitions"]) s.repetitions = uint32_t(integer(c, root["repetitions"], "repetitions", 1, 10000));
  if (root["warmup"]) s.warmup = uint32_t(integer(c, root["warmup"], "warmup", 0, 1000));
  if (root["timeout"]) s.timeout_s = double(integer(c, root["timeout"], "timeout", 1, 7 * 24 * 3600));
  // Every run is a cell held in memory (and a replay of seconds or more):
  // a few lines of YAML must not ask for a billion.
  const uint64_t rounds = uint64_t(s.warmup) + s.repetitions;
  const uint64_t runs = uint64_t(s.traces.size()) * s.allocators.size() * rounds;
  if (runs > kMaxRuns)
    c.fail(root["repetitions"] ? root["repetitions"] : root["traces"],
           "the experiment has " + std::to_string(runs) + " runs (" + std::to_string(s.traces.size()) + " traces x " +
               std::to_string(s.allocators.size()) + " allocators x " + std::to_string(rounds) +
               " rounds of warmup and repetitions), more than the " + std::to_string(kMaxRuns) +
               " one experiment may have: split it");
  if (root["baseline"]) {
    s.baseline = text(c, root["baseline"], "baseline");
    if (std::none_of(s.allocators.begin(), s.allocators.end(),
                     [&](const AllocatorSpec& a) { return a.label == s.baseline; })) {
      std::vector<std::string> labels;
      for (const AllocatorSpec& a : s.allocators) labels.push_back(a.label);
      c.fail(root["baseline"],
             "'baseline': no allocator labelled " + q(s.baseline) + " (labels: " + join(labels) + ")");
    }
  } else {
    s.baseline = s.allocators[0].label;
  }
  return s;
}

ExperimentSpec load_experiment(const std::string& path) {
  std::string text;
  try {
    // (An experiment file is a few KiB; 16 MiB is far more than any needs.)
    text = common::read_input_file(path, "an experiment", uint64_t{16} << 20);
  } catch (const std::runtime_error& e) {
    throw SpecError(e.what());
  }
  return parse_experiment(text, path);
}

}  // namespace heaplab::experiments
