// Fuzz target for parse_bounded_json (common/json.h), the bounded reading of
// JSON from users' files (a trace's metadata). Its own scan decides what
// nlohmann may parse; the property checked: whatever it accepts is within
// the bounds it was given (nesting depth; and arrays, objects, members and
// elements: at most twice the value bound, which counts arrays, objects and
// commas), so that no accepted text costs more memory than they allow. The first
// input byte picks small bounds, so that the refusals are reached.
//   scripts/fuzz.sh 60 json_fuzz      (libFuzzer with clang, ASan/UBSan)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/json.h"

namespace {

// Depth (a scalar is 0, an array or object one more than its deepest
// value) and the arrays, objects and members/elements of `j`.
void measure(const nlohmann::json& j, unsigned depth, unsigned* max_depth, size_t* nodes) {
  if (!j.is_array() && !j.is_object()) return;
  ++*nodes;
  if (depth + 1 > *max_depth) *max_depth = depth + 1;
  for (const auto& v : j) {
    ++*nodes;
    measure(v, depth + 1, max_depth, nodes);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const unsigned depth_bound = 1 + data[0] % 8;
  const size_t value_bound = 1 + (data[0] >> 3) * 4;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string why;
  const nlohmann::json j = heaplab::common::parse_bounded_json(text, &why, size_t{1} << 20, depth_bound, value_bound);
  if (j.is_discarded()) return 0;
  if (!why.empty()) {
    std::fprintf(stderr, "json_fuzz: parsed, yet refused: %s\n", why.c_str());
    std::abort();
  }
  unsigned depth = 0;
  size_t nodes = 0;
  measure(j, 0, &depth, &nodes);
  // Every member or element past a container's first follows a comma.
  if (depth > depth_bound || nodes > 2 * value_bound) {
    std::fprintf(stderr, "json_fuzz: accepted depth %u, %zu values, bounds %u and %zu\n", depth, nodes, depth_bound,
                 value_bound);
    std::abort();
  }
  return 0;
}
