#include "replay/pinning.h"

#include <hwloc.h>

#include <cstdlib>
#include <stdexcept>

namespace heaplab::replay {

namespace {

hwloc_topology_t topo(void* t) { return static_cast<hwloc_topology_t>(t); }
hwloc_bitmap_t bits(void* b) { return static_cast<hwloc_bitmap_t>(b); }

std::string list_of(hwloc_const_bitmap_t b) {
  char* s = nullptr;
  hwloc_bitmap_list_asprintf(&s, b);
  std::string out = s ? s : "";
  free(s);
  return out;
}

}  // namespace

Pinning::Pinning(const std::string& policy, unsigned threads) : policy_(policy) {
  if (policy_ == "none") return;
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0)
    throw std::runtime_error("hwloc: cannot read the machine's topology");
  topo_ = t;
  // Only the processing units this process may run on.
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_cpuset(t);
  std::vector<hwloc_obj_t> pus;
  for (hwloc_obj_t pu = nullptr; (pu = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_PU, pu));)
    if (hwloc_bitmap_isset(allowed, pu->os_index)) pus.push_back(pu);
  if (pus.empty()) throw std::runtime_error("hwloc: no processing unit is allowed");
  const unsigned n = std::max(threads, 1u);
  if (policy_ == "compact") {
    for (unsigned i = 0; i < n; ++i) sets_.push_back(hwloc_bitmap_dup(pus[i % pus.size()]->cpuset));
  } else if (policy_ == "scatter") {
    std::vector<hwloc_bitmap_t> out(n);
    hwloc_obj_t root = hwloc_get_root_obj(t);
    hwloc_distrib(t, &root, 1, out.data(), n, INT_MAX, 0);
    for (hwloc_bitmap_t b : out) {
      hwloc_bitmap_singlify(b);  // one PU each, not a whole core's
      sets_.push_back(b);
    }
  } else {
    // A list of OS indices.
    std::vector<unsigned> ids;
    const char* p = policy_.c_str();
    while (*p) {
      char* end = nullptr;
      const unsigned long v = std::strtoul(p, &end, 10);
      if (end == p || (*end && *end != ',') || v > 1u << 20)
        throw std::invalid_argument("--pin: expected none, compact, scatter or a list of CPU numbers "
                                    "such as 0,2, not '" + policy_ + "'");
      if (!hwloc_bitmap_isset(allowed, unsigned(v)))
        throw std::invalid_argument("--pin: CPU " + std::to_string(v) +
                                    " is not one this process may use (allowed: " + list_of(allowed) + ")");
      ids.push_back(unsigned(v));
      p = *end ? end + 1 : end;
    }
    if (ids.empty()) throw std::invalid_argument("--pin: no CPU given");
    for (unsigned i = 0; i < n; ++i) {
      hwloc_bitmap_t b = hwloc_bitmap_alloc();
      hwloc_bitmap_only(b, ids[i % ids.size()]);
      sets_.push_back(b);
    }
  }
  // The sampler: a core none of the replay threads uses, if there is one.
  hwloc_bitmap_t used = hwloc_bitmap_alloc();
  for (void* s : sets_) hwloc_bitmap_or(used, used, bits(s));
  for (hwloc_obj_t core = nullptr; (core = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, core));) {
    if (!hwloc_bitmap_intersects(core->cpuset, used) && hwloc_bitmap_intersects(core->cpuset, allowed)) {
      hwloc_bitmap_t b = hwloc_bitmap_dup(core->cpuset);
      hwloc_bitmap_and(b, b, allowed);
      sampler_set_ = b;
      break;
    }
  }
  hwloc_bitmap_free(used);
}

Pinning::~Pinning() {
  for (void* s : sets_) hwloc_bitmap_free(bits(s));
  if (sampler_set_) hwloc_bitmap_free(bits(sampler_set_));
  if (topo_) hwloc_topology_destroy(topo(topo_));
}

bool Pinning::bind(int i) {
  if (!active()) return true;
  void* set = i < 0 ? sampler_set_ : sets_[size_t(i) % sets_.size()];
  if (!set) return true;
  if (hwloc_set_cpubind(topo(topo_), bits(set), HWLOC_CPUBIND_THREAD) != 0) {
    error_ = "cannot bind to CPUs " + list_of(bits(set));
    return false;
  }
  return true;
}

nlohmann::json Pinning::to_json() const {
  nlohmann::json j;
  j["policy"] = policy_;
  if (!active()) return j;
  nlohmann::json threads = nlohmann::json::array();
  for (void* s : sets_) threads.push_back(list_of(bits(s)));
  j["threads"] = threads;
  j["sampler"] = sampler_set_ ? list_of(bits(sampler_set_)) : "unbound (no core left over)";
  hwloc_topology_t t = topo(topo_);
  j["topology"] = {{"packages", hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE)},
                   {"numa_nodes", hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE)},
                   {"cores", hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE)},
                   {"pus", hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU)}};
  if (!error_.empty()) j["error"] = error_;
  return j;
}

}  // namespace heaplab::replay
