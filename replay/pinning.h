// Where the replay threads and the memory sampler run, decided with hwloc:
//   none     no binding (the kernel schedules)
//   compact  thread i on the i-th processing unit in topology order (fills
//            a core's hardware threads, then the next core)
//   scatter  threads spread as far apart as the topology allows
//            (hwloc_distrib: across packages, then cores)
//   LIST     thread i on processing unit LIST[i mod n] (OS indices, "0,2,4")
// With more replay threads than processing units, several share one (the
// result says so). The sampler gets a core no replay thread uses when there
// is one, else it is left unbound.
//
// Memory binding (NUMA), for the whole replayer process, before the
// allocator under test allocates anything:
//   none        the kernel's default (first touch)
//   local       bound to the NUMA nodes of the CPUs the replay threads are
//               pinned to (needs --pin)
//   interleave  pages spread round-robin over all nodes
//   LIST        bound to the nodes of LIST (OS indices, "0,1")
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heaplab::replay {

class Pinning {
 public:
  // Throws std::invalid_argument with one line for a bad policy or a PU this
  // process may not use.
  Pinning(const std::string& policy, unsigned threads, const std::string& membind = "none");
  ~Pinning();
  Pinning(const Pinning&) = delete;
  Pinning& operator=(const Pinning&) = delete;

  bool active() const { return policy_ != "none"; }
  // Binds the calling thread: replay thread i, or the sampler (i = -1).
  // Returns false (and the reason in error()) if the kernel refused.
  bool bind(int i);
  // Applies the memory binding to the process; throws std::runtime_error
  // with one line if the kernel refuses.
  void bind_memory();
  // Policy, per-thread PU sets, the sampler's, and the topology.
  nlohmann::json to_json() const;

 private:
  void set_membind_nodes();
  std::string policy_;
  std::string membind_;
  void* nodes_ = nullptr;        // hwloc_bitmap_t nodeset for membind (or null)
  bool moot_ = false;            // no NUMA in the kernel, one node: nothing to bind
  void* topo_ = nullptr;         // hwloc_topology_t
  std::vector<void*> sets_;      // hwloc_bitmap_t per replay thread
  void* sampler_set_ = nullptr;  // hwloc_bitmap_t, or null (unbound)
  std::string error_;
};

}  // namespace heaplab::replay
