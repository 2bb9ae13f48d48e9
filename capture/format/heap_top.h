// One helper for the binary min-heaps the merges keep (the trace reader's
// of per-thread chunks, the normaliser's of per-thread record streams).
// Heaps built and kept with std::push_heap/std::pop_heap and the same
// `greater` (a comes after b) stay valid under it.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace heaplab {

// Puts x where the top (v[0], v not empty) was and moves it down to its
// place: a pop and a push in one pass, for a merge whose current source
// stays first for a run and then moves on.
template <typename T, typename Greater>
void replace_heap_top(std::vector<T>& v, T x, Greater greater) {
  const size_t n = v.size();
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && greater(v[c], v[c + 1])) ++c;
    if (!greater(x, v[c])) break;
    v[i] = std::move(v[c]);
    i = c;
  }
  v[i] = std::move(x);
}

}  // namespace heaplab
