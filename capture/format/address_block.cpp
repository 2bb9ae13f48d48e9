#include "capture/format/address_block.h"

#include "capture/format/bytes.h"
#include "capture/format/zstd_frame.h"

namespace heaplab::trace {

using namespace bytes;

namespace {
constexpr uint32_t kAddressBlockVersion = 1;
}

// Payload: u32 version (1), u32 count, u64 first_seq, u64 raw_size (count x
// 8), then one zstd frame of `count` u64 values: 0 for an event without an
// address, else 1 + zigzag(address - the previous non-zero address in the
// block, starting from 0). Neighbouring blocks of one size class sit close
// together, so the deltas are small and compress well.
std::string encode_address_block(uint64_t first_seq, const uint64_t* addresses, uint32_t count) {
  std::string raw;
  raw.reserve(size_t{count} * 8);
  uint64_t prev = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t a = addresses[i];
    put_u64(raw, a == 0 ? 0 : 1 + zigzag(int64_t(a - prev)));
    if (a != 0) prev = a;
  }
  std::string out;
  put_u32(out, kAddressBlockVersion);
  put_u32(out, count);
  put_u64(out, first_seq);
  put_u64(out, raw.size());
  append_zstd_frame(out, raw);
  return out;
}

bool address_block_header(std::string_view payload, uint64_t& first_seq, uint32_t& count, std::string& error) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  if (payload.size() < 4) {
    error = "address block too short";
    return false;
  }
  if (load_u32(p) != kAddressBlockVersion) {
    first_seq = 0;
    count = 0;  // a later layout (whatever its size): not read here
    return true;
  }
  if (payload.size() < kAddressBlockHeader) {
    error = "address block too short";
    return false;
  }
  first_seq = load_u64(p + 8);
  count = load_u32(p + 4);
  if (count == 0 || count > kAddressBlockEvents || load_u64(p + 16) != uint64_t{count} * 8) {
    error = "address block sizes do not match its count";
    return false;
  }
  if (count - 1 > ~uint64_t{0} - first_seq) {
    error = "address block seqs run past 2^64";
    return false;
  }
  return true;
}

std::optional<AddressBlock> decode_address_block(std::string_view payload, std::string& error) {
  AddressBlock b;
  uint32_t count = 0;
  if (!address_block_header(payload, b.first_seq, count, error)) return std::nullopt;
  if (count == 0) return b;
  std::string raw;
  if (!read_zstd_frame(payload.substr(kAddressBlockHeader), uint64_t{count} * 8, raw)) {
    error = "address block does not decompress to its size (corrupt data)";
    return std::nullopt;
  }
  b.addresses.resize(count);
  uint64_t prev = 0;
  const auto* r = reinterpret_cast<const uint8_t*>(raw.data());
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t v = load_u64(r + size_t{i} * 8);
    if (v == 0) continue;
    prev += uint64_t(unzigzag(v - 1));
    b.addresses[i] = prev;
  }
  return b;
}

}  // namespace heaplab::trace
