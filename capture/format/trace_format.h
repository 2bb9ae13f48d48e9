// Layout constants of the heaplab trace format (.hlt). FORMAT.md is the
// normative description; this header mirrors it for the reader and writer.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace heaplab::trace {

inline constexpr uint16_t kFormatMajor = 1;
// The newest minor this reader knows. A writer writes the lowest minor that
// holds the file: 1.0 without MEMX and ADDR blocks (byte for byte what 1.0
// was), 1.1 with MEMX, 1.2 with ADDR.
inline constexpr uint16_t kFormatMinor = 2;
inline constexpr uint16_t kFormatMinorPlain = 0;
inline constexpr uint16_t kFormatMinorMemory = 1;
inline constexpr uint16_t kFormatMinorAddresses = 2;

// File header: 32 bytes at offset 0.
inline constexpr char kFileMagic[8] = {'H', 'E', 'A', 'P', 'L', 'A', 'B', 'T'};
inline constexpr size_t kFileHeaderSize = 32;
enum FileFlag : uint32_t { kFileHasTime = 1u << 0 };

// Thread indices are below 2^24.
inline constexpr uint32_t kMaxThreads = 1u << 24;

// Every block: 16-byte header {u32 type, u32 length, u64 checksum} + payload.
inline constexpr size_t kBlockHeaderSize = 16;
inline constexpr uint32_t kMaxBlockPayload = 1u << 30;
// Largest decoded chunk a reader accepts: 2^20 events x 57 bytes (the op byte
// and seven 8-byte values) is the worst case.
inline constexpr uint32_t kMaxChunkRawSize = 64u << 20;

constexpr uint32_t fourcc(char a, char b, char c, char d) {
  return uint32_t(uint8_t(a)) | uint32_t(uint8_t(b)) << 8 | uint32_t(uint8_t(c)) << 16 | uint32_t(uint8_t(d)) << 24;
}
enum BlockType : uint32_t {
  kBlockMeta = fourcc('M', 'E', 'T', 'A'),
  kBlockChunk = fourcc('C', 'H', 'N', 'K'),
  kBlockThreads = fourcc('T', 'H', 'R', 'D'),
  kBlockIndex = fourcc('I', 'N', 'D', 'X'),
  kBlockMemory = fourcc('M', 'E', 'M', 'X'),     // 1.1: memory besides the heap (memory_event.h)
  kBlockAddresses = fourcc('A', 'D', 'D', 'R'),  // 1.2: a replay's addresses (address_block.h)
};

// Chunk payload header (before the column data).
inline constexpr size_t kChunkHeaderSize = 96;
inline constexpr unsigned kColumnCount = 7;  // seq, time, id, old, size, align, count
enum Column : unsigned { kColSeq, kColTime, kColId, kColOld, kColSize, kColAlign, kColCount };
enum Codec : uint8_t { kCodecNone = 0, kCodecZstd = 1, kCodecLz4 = 2 };
enum ChunkFlag : uint8_t { kChunkHasTime = 1u << 0 };

// Zeroed bytes a decoder keeps after the columns (fixed-width values are
// read with unconditional 8-byte loads).
inline constexpr size_t kDecodePadding = 16;

// Index entry: 48 bytes.
inline constexpr size_t kIndexEntrySize = 48;

// Footer: 32 bytes at the end of a complete file.
inline constexpr char kFooterMagic[8] = {'H', 'L', 'T', 'F', 'O', 'O', 'T', '1'};
inline constexpr size_t kFooterSize = 32;

// Op byte: low 6 bits op code, bit 6 = null result, bit 7 = failed.
inline constexpr uint8_t kOpMask = 0x3f;
inline constexpr uint8_t kOpNullBit = 0x40;
inline constexpr uint8_t kOpFailedBit = 0x80;

// Any problem reading or writing a trace. what() is one line naming the file
// and, where there is one, the byte offset.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// XXH3-64 with the block type and length as seed (see FORMAT.md).
uint64_t block_checksum(uint32_t type, const void* payload, size_t len);
// The same over `len` bytes of `fd` from `offset` (a block written as it
// was made); false (errno set) if they cannot be read.
bool block_checksum_of_file(uint32_t type, int fd, uint64_t offset, uint64_t len, uint64_t& sum);
uint64_t plain_checksum(const void* data, size_t len);

}  // namespace heaplab::trace
