// ADDR blocks (format 1.2): the address each event's call returned, or the
// address it consumed, in one replay (`heaplab replay --emit-trace`). A
// trace keeps its events as they were; the addresses ride beside them, in
// blocks older readers skip (FORMAT.md §16).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace heaplab::trace {

// Events per ADDR block (the writer's; a reader takes any count up to it).
inline constexpr uint32_t kAddressBlockEvents = 1u << 20;
inline constexpr size_t kAddressBlockHeader = 24;

struct AddressBlock {
  uint64_t first_seq = 0;
  // addresses[i]: event first_seq + i's address, 0 for none.
  std::vector<uint64_t> addresses;
};

// The payload of one ADDR block: `count` (1 .. kAddressBlockEvents)
// addresses of events first_seq, first_seq + 1, ...
std::string encode_address_block(uint64_t first_seq, const uint64_t* addresses, uint32_t count);

// Reads a payload's header only: its first seq and count. False (with
// `error`) if it is too short or its count is impossible; a block of a later
// version reads as count 0.
bool address_block_header(std::string_view payload, uint64_t& first_seq, uint32_t& count, std::string& error);

// Decodes a payload; nullopt (with `error`) if it is damaged.
std::optional<AddressBlock> decode_address_block(std::string_view payload, std::string& error);

}  // namespace heaplab::trace
