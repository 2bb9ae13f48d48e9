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
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace heaplab::replay {

class Pinning {
 public:
  // Throws std::invalid_argument with one line for a bad policy or a PU this
  // process may not use.
  Pinning(const std::string& policy, unsigned threads);
  ~Pinning();
  Pinning(const Pinning&) = delete;
  Pinning& operator=(const Pinning&) = delete;

  bool active() const { return policy_ != "none"; }
  // Binds the calling thread: replay thread i, or the sampler (i = -1).
  // Returns false (and the reason in error()) if the kernel refused.
  bool bind(int i);
  // Policy, per-thread PU sets, the sampler's, and the topology.
  nlohmann::json to_json() const;

 private:
  std::string policy_;
  void* topo_ = nullptr;            // hwloc_topology_t
  std::vector<void*> sets_;         // hwloc_bitmap_t per replay thread
  void* sampler_set_ = nullptr;     // hwloc_bitmap_t, or null (unbound)
  std::string error_;
};

}  // namespace heaplab::replay
