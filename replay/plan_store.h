// Where replay plans live: on disk, built once per trace content and plan
// options and kept for later commands (`heaplab replay` run again, another
// allocator, an experiment's next run), in a cache directory with a size
// limit, least recently used first out. A plan too big for the cache is
// built into an unnamed file in the same directory, for this command only.
//
//   directory: $HEAPLAB_PLAN_DIR, else $XDG_CACHE_HOME/heaplab/plans, else
//              ~/.cache/heaplab/plans
//   limit:     $HEAPLAB_PLAN_CACHE_MIB (0: keep none), else the smaller of
//              64 GiB and half of what the cache and the free space add up to
//   entry:     TRACEID-tTHREADS-OPTIONS-vVERSION.plan and .json (the plan's
//              summary); the .plan is renamed into place last
//   in use:    a command holds a shared flock on a plan it found or kept
//              until it closes it; a plan in use is not removed to make
//              room on the disk (that frees nothing until it is closed)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "capture/format/trace_reader.h"
#include "replay/plan.h"

namespace heaplab::replay {

class PlanStore {
 public:
  static std::string default_dir();
  // HEAPLAB_PLAN_CACHE_MIB in bytes, if set; throws PlanError, in one line,
  // if it is not a whole number of MiB (checked before a replay starts).
  static std::optional<uint64_t> limit_set();
  explicit PlanStore(std::string dir = default_dir());

  // The plan kept for the trace whose content id is `id`, built with `opt`:
  // its descriptor (read-only) and summary; -1 if there is none. Its
  // header is checked against the hash kept beside it, and every step,
  // time and live sum against their checksums (plan.h, plan_sums_damage);
  // one that fails is removed, and -1 returned, with *damaged saying how
  // its arrays failed (left alone where only the header did).
  int find(const std::string& id, const PlanOptions& opt, PlanSummary& summary, std::string* damaged = nullptr) const;

  // Builds `r`'s plan here and returns its descriptor; `kept` says whether
  // it stays for later commands. Where the directory cannot be written,
  // or its file system cannot hold the plan with 512 MiB left free beside
  // it, the plan goes into memory (a memfd), as `where` then says; throws
  // PlanError, in one line naming the sizes, when the plan would take more
  // than that memory (half the memory available, on a disk too small), for
  // a bad HEAPLAB_PLAN_CACHE_MIB, or for an inconsistent trace.
  int build(const trace::TraceReader& r, const PlanOptions& opt, const std::string& id, PlanSummary& summary,
            bool& kept, std::string& where) const;

  // Removes the plan kept for `id` and `opt` if it is still the file
  // `file` (device, inode) that was found (damaged, as only the replayer,
  // which checks the steps, can tell); not one another command has put in
  // its place since.
  void remove(const std::string& id, const PlanOptions& opt, std::pair<uint64_t, uint64_t> file) const;

  const std::string& dir() const { return dir_; }
  // Why the last build() did not keep a plan it meant to keep (a file it
  // could not make, write or name: a full disk, for one); "" otherwise.
  const std::string& not_kept() const { return not_kept_; }

 private:
  std::string name(const std::string& id, const PlanOptions& opt) const;
  // The most bytes of kept plans: HEAPLAB_PLAN_CACHE_MIB, else half of what
  // the kept plans and the free space make, at most 64 GiB.
  uint64_t cache_limit() const;
  // Removes kept plans, least recently used first, until `need` more bytes
  // fit under `limit`; returns whether they do.
  bool make_room(uint64_t need, uint64_t limit) const;
  std::string dir_;
  mutable std::string not_kept_;
};

}  // namespace heaplab::replay
