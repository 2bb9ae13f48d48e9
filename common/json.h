// JSON from a user's files (a trace's metadata), parsed within bounds:
// nlohmann builds a node per value, so deeply nested or huge text costs 50
// to 100 times its size in memory (20 MB of '[' took 1.5 GB; 16 MiB of
// "[{},{},...]" 565 MB). Text larger than `max_bytes`, nested deeper than
// `max_depth` or holding more than `max_values` arrays, objects and commas
// between members (so at most twice that many arrays, objects, members and
// elements) is not parsed: it reads as discarded, as text that is not JSON does, and
// `why` says which. (Within the bounds: at most about 100 MB.)
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace heaplab::common {

inline constexpr size_t kJsonMaxBytes = size_t{16} << 20;
inline constexpr unsigned kJsonMaxDepth = 64;
inline constexpr size_t kJsonMaxValues = 1000000;

inline nlohmann::json parse_bounded_json(std::string_view text, std::string* why = nullptr,
                                         size_t max_bytes = kJsonMaxBytes, unsigned max_depth = kJsonMaxDepth,
                                         size_t max_values = kJsonMaxValues) {
  const auto refuse = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return nlohmann::json(nlohmann::json::value_t::discarded);
  };
  if (text.size() > max_bytes) return refuse("larger than " + std::to_string(max_bytes >> 20) + " MiB");
  unsigned depth = 0;
  size_t values = 0;
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
      if (++depth > max_depth) return refuse("nested deeper than " + std::to_string(max_depth) + " levels");
      if (++values > max_values) return refuse("more than " + std::to_string(max_values) + " values");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == ',' && ++values > max_values) {
      return refuse("more than " + std::to_string(max_values) + " values");
    }
  }
  if (why) why->clear();
  return nlohmann::json::parse(text, nullptr, false);
}

}  // namespace heaplab::common
