// Small text helpers shared by every layer's reports.
#pragma once

#include <cstdint>
#include <string>

namespace heaplab::common {

// 1234567 -> "1,234,567".
std::string group_digits(uint64_t v);

}  // namespace heaplab::common
