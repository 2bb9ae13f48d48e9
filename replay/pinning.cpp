#include "replay/pinning.h"

#include <hwloc.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
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

// A list of OS indices ("0,2"), or an error naming the option.
std::vector<unsigned> index_list(const std::string& opt, const std::string& v, const std::string& expected) {
  std::vector<unsigned> ids;
  const char* p = v.c_str();
  while (*p) {
    char* end = nullptr;
    const unsigned long x = std::strtoul(p, &end, 10);
    if (end == p || (*end && *end != ',') || x > 1u << 20 || *p == '-' || *p == '+')
      throw std::invalid_argument(opt + ": expected " + expected + ", not '" + v + "'");
    ids.push_back(unsigned(x));
    p = *end ? end + 1 : end;
  }
  if (ids.empty()) throw std::invalid_argument(opt + ": expected " + expected + ", not '" + v + "'");
  return ids;
}

Pinning::Pinning(const std::string& policy, unsigned threads, const std::string& membind)
    : policy_(policy), membind_(membind) {
  if (policy_ == "none" && membind_ == "none") return;
  if (membind_ == "local" && policy_ == "none")
    throw std::invalid_argument("--membind local: binds memory to the nodes of the pinned CPUs; give --pin too");
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0 || hwloc_topology_load(t) != 0)
    throw std::runtime_error("hwloc: cannot read the machine's topology");
  topo_ = t;
  set_membind_nodes();
  if (policy_ == "none") return;
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
    const std::vector<unsigned> ids =
        index_list("--pin", policy_, "none, compact, scatter or a list of CPU numbers such as 0,2");
    for (unsigned v : ids)
      if (!hwloc_bitmap_isset(allowed, v))
        throw std::invalid_argument("--pin: CPU " + std::to_string(v) +
                                    " is not one this process may use (allowed: " + list_of(allowed) + ")");
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
  if (membind_ == "local") {  // the nodes of the pinned CPUs
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc(), nodes = hwloc_bitmap_alloc();
    for (void* s : sets_) hwloc_bitmap_or(cpus, cpus, bits(s));
    hwloc_cpuset_to_nodeset(t, cpus, nodes);
    hwloc_bitmap_free(cpus);
    nodes_ = nodes;
  }
}

void Pinning::set_membind_nodes() {
  if (membind_ == "none" || membind_ == "local") return;
  hwloc_topology_t t = topo(topo_);
  hwloc_const_bitmap_t allowed = hwloc_topology_get_allowed_nodeset(t);
  if (membind_ == "interleave") {
    nodes_ = hwloc_bitmap_dup(allowed);
    return;
  }
  const std::vector<unsigned> ids =
      index_list("--membind", membind_, "none, local, interleave or a list of NUMA nodes such as 0,1");
  hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
  nodes_ = nodes;
  for (unsigned v : ids) {
    if (!hwloc_bitmap_isset(allowed, v))
      throw std::invalid_argument("--membind: NUMA node " + std::to_string(v) +
                                  " is not one this process may use (allowed: " + list_of(allowed) + ")");
    hwloc_bitmap_set(nodes, v);
  }
}

void Pinning::bind_memory() {
  if (!nodes_) return;
  const hwloc_membind_policy_t how = membind_ == "interleave" ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
  if (hwloc_set_membind(topo(topo_), bits(nodes_), how, HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) == 0) return;
  // A kernel without NUMA support has one node, all the memory: binding to
  // it is what happens anyway.
  if (errno == ENOSYS && hwloc_bitmap_isequal(bits(nodes_), hwloc_topology_get_topology_nodeset(topo(topo_)))) {
    moot_ = true;
    return;
  }
  throw std::runtime_error("--membind " + membind_ + ": the kernel refused to bind memory to NUMA node(s) " +
                           list_of(bits(nodes_)) + ": " + std::strerror(errno));
}

Pinning::~Pinning() {
  for (void* s : sets_) hwloc_bitmap_free(bits(s));
  if (sampler_set_) hwloc_bitmap_free(bits(sampler_set_));
  if (nodes_) hwloc_bitmap_free(bits(nodes_));
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
  if (membind_ != "none") {
    j["membind"] = {{"policy", membind_}, {"nodes", nodes_ ? list_of(bits(nodes_)) : ""}};
    // What the kernel reports back for the process.
    if (moot_) j["membind"]["kernel"] = "no NUMA support: one node, all the memory (the binding is moot)";
    hwloc_bitmap_t got = hwloc_bitmap_alloc();
    hwloc_membind_policy_t how;
    if (!moot_ && hwloc_get_membind(topo(topo_), got, &how, HWLOC_MEMBIND_PROCESS | HWLOC_MEMBIND_BYNODESET) == 0)
      j["membind"]["kernel"] = {{"nodes", list_of(got)},
                                {"policy", how == HWLOC_MEMBIND_BIND         ? "bind"
                                           : how == HWLOC_MEMBIND_INTERLEAVE ? "interleave"
                                           : how == HWLOC_MEMBIND_FIRSTTOUCH ? "first touch"
                                                                             : "other"}};
    hwloc_bitmap_free(got);
    j["numa_nodes"] = hwloc_get_nbobjs_by_type(topo(topo_), HWLOC_OBJ_NUMANODE);
  }
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
