// Tests' view of a plan with dense ids: refs (slot and generation, plan.h)
// turned back into the replay ids build_plan counts, by running the plan's
// threads as the engine could, checking on the way what the engine relies on.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "replay/plan.h"

namespace heaplab::replay::testutil {

// Each thread's steps unpacked (plan.h's Step: a kStepExt folded into the
// step after it), without its handoff steps, with every ref replaced by a
// dense id. A producing step's id is taken from `want` (the expected steps,
// thread by thread, in the same order) where given, else counted 1, 2, 3...
// in the order the run makes them (for one thread: the order of creation).
// A consuming step's old is the id of what its slot holds when it runs.
//
// The run: threads in turn (in a random order with a nonzero seed), each
// step once it can run in the engine: the slots it reads hold the
// generations it names, and a handoff's thread has made its steps. It adds a
// test failure if the plan could wait forever, or if a step overwrites a
// slot whose object no step has consumed yet.
inline std::vector<std::vector<Step>> dense_steps(const MappedPlan& p,
                                                  const std::vector<std::vector<Step>>* want = nullptr,
                                                  unsigned seed = 0) {
  struct SlotState {
    uint32_t gen = 0;
    uint64_t name = 0;
    bool consumed = true;
  };
  std::vector<SlotState> slot(p.slots() + 1);
  std::vector<std::vector<Step>> out(p.threads());
  std::vector<uint64_t> pos(p.threads(), 0);
  uint64_t next_name = 0;
  std::mt19937 rng(seed);
  const auto holds = [&](uint64_t ref) {
    return ref == 0 || (ref_slot(ref) < slot.size() && slot[ref_slot(ref)].gen == ref_generation(ref));
  };
  const auto name_of = [&](uint64_t ref) { return ref == 0 ? 0 : slot[ref_slot(ref)].name; };
  // Runs thread t's next step if it can; false if it must wait.
  const auto step = [&](uint32_t t) {
    const PlanStep& u = p.steps(t)[pos[t]];
    if (u.op() == kStepExt) {  // (folded into the next)
      ++pos[t];
      return true;
    }
    const PlanStep* ext = pos[t] > 0 && p.steps(t)[pos[t] - 1].op() == kStepExt ? &p.steps(t)[pos[t] - 1] : nullptr;
    const Step s = unpack_step(u, ext);
    const unsigned op = s.head & 0xff;
    if (op == kStepHandoff) {
      if (s.old >= p.threads() || pos[s.old] < s.size) return false;
      ++pos[t];
      return true;
    }
    const bool reads = op != kStepMap && op != kStepArg;
    if (reads && !holds(s.old)) return false;
    Step d = s;
    if (reads) {
      d.old = name_of(s.old);
      // Consumed: every step but a touch_object (the engine never reads
      // it). (A remap that leaves part of its region reads the ref, and the
      // region keeps it: such a slot is retired, never produced into again.)
      if (s.old != 0 && op != kStepTouchObject) slot[ref_slot(s.old)].consumed = true;
    }
    if (const uint64_t ref = s.id(); ref != 0) {
      SlotState& x = slot.at(ref_slot(ref));
      if (!x.consumed && x.gen != 0)
        ADD_FAILURE() << "thread " << t << " step " << pos[t] << " overwrites slot " << ref_slot(ref)
                      << " whose object (generation " << x.gen << ") nothing consumed";
      const size_t j = out[t].size();
      const uint64_t name = want && t < want->size() && j < (*want)[t].size() ? (*want)[t][j].id() : ++next_name;
      x = SlotState{ref_generation(ref), name, false};
      d.head = (d.head & 0xffff) | name << 16;
    }
    out[t].push_back(d);
    ++pos[t];
    return true;
  };
  std::vector<uint32_t> order(p.threads());
  for (uint32_t t = 0; t < p.threads(); ++t) order[t] = t;
  for (;;) {
    bool done = true, moved = false;
    if (seed) std::shuffle(order.begin(), order.end(), rng);
    for (uint32_t t : order) {
      // A random number of steps (or all it can) before the next thread.
      uint64_t budget = seed ? 1 + rng() % 64 : UINT64_MAX;
      while (pos[t] < p.step_count(t) && budget-- && step(t)) moved = true;
      if (pos[t] < p.step_count(t)) done = false;
    }
    if (done) break;
    if (!moved) {
      std::string where;
      for (uint32_t t = 0; t < p.threads(); ++t)
        where +=
            " thread " + std::to_string(t) + " at " + std::to_string(pos[t]) + "/" + std::to_string(p.step_count(t));
      ADD_FAILURE() << "the plan would wait forever:" << where;
      break;
    }
  }
  return out;
}

}  // namespace heaplab::replay::testutil
