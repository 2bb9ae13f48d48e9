// JSON from a user's files (a trace's metadata), parsed within bounds:
// nlohmann builds a node per value, so deeply nested or huge text costs 50
// to 100 times its size in memory (20 MB of '[' took 1.5 GB). Text larger
// than `max_bytes` or nested deeper than `max_depth` is not parsed: it reads
// as discarded, as text that is not JSON does, and `why` says which.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace heaplab::common {

inline constexpr size_t kJsonMaxBytes = size_t{16} << 20;
inline constexpr unsigned kJsonMaxDepth = 64;

inline nlohmann::json parse_bounded_json(std::string_view text, std::string* why = nullptr,
                                         size_t max_bytes = kJsonMaxBytes, unsigned max_depth = kJsonMaxDepth) {
  const auto refuse = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return nlohmann::json(nlohmann::json::value_t::discarded);
  };
  if (text.size() > max_bytes) return refuse("larger than " + std::to_string(max_bytes >> 20) + " MiB: not read");
  unsigned depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return refuse("nested deeper than " + std::to_string(max_depth) + " levels: not read");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  if (why) why->clear();
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace heaplab::common
