// Fuzz target for the raw-capture reader and the normaliser: the input
// describes a capture (a valid file header, then blocks of records with
// arbitrary contents, thread slots, sequence numbers and placement in the
// mapping or in .blocks); the files are written to a scratch directory and
// normalised. Rejecting bad input with RawError/TraceError is fine; crashes,
// sanitizer reports and hangs are not.
// Bit 4 of the flags reads the files as a capture still running would be
// read (LiveRawFile and normalise_live, the program already ended), bit 5
// consuming them as heaplab capture does (blocks given back, .blocks
// punched).
//   input: byte 0      flags: bit 0 TSC clock, bit 1 write .blocks, bits 2-3 threads-1,
//                      bit 4 live reader, bit 5 consume
//          bytes 1-8   start ticks
//          then per block: 1 byte (bits 0-1 thread, bit 2 appended, bits 3-5 seq),
//                      1 byte record count n, n * 32 bytes of records
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "capture/format/trace_format.h"
#include "capture/normalise/normalise.h"
#include "capture/normalise/raw_live.h"
#include "capture/shim/raw_format.h"

namespace {

using namespace heaplab::raw;

const std::string& scratch_dir() {
  static const std::string dir = [] {
    std::string base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string d = base + "/heaplab-normalise-fuzz-" + std::to_string(getpid());
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 9) return 0;
  const uint8_t flags = data[0];
  const uint32_t threads = 1u + ((flags >> 2) & 3u);
  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof h.magic);
  h.version = kVersion;
  h.header_size = h.block_size = uint32_t(kBlockSize);
  h.record_size = uint32_t(kRecordSize);
  h.pid = 1;
  h.clock = (flags & 1) ? kClockTsc : kClockMonotonic;
  std::memcpy(&h.start_ticks, data + 1, 8);
  h.start_mono_ns = 1000;
  h.next_thread = threads;
  std::string ring(kBlockSize * (1 + threads), '\0');
  std::string appended;
  size_t pos = 9;
  while (pos + 2 <= size) {
    uint8_t sel = data[pos], n = data[pos + 1];
    pos += 2;
    size_t records = std::min<size_t>({n, (size - pos) / kRecordSize, kRecordsPerBlock});
    std::string block(kBlockSize, '\0');
    BlockHeader bh{};
    bh.magic = kBlockMagic;
    bh.thread = sel & 3u;  // may exceed `threads`: the reader must ignore it
    bh.thread_block_seq = (sel >> 3) & 7u;
    bh.tid = 100 + bh.thread;
    bh.ticks = h.start_ticks + 10 * bh.thread_block_seq;
    bh.mono_ns = 1000 + 10 * bh.thread_block_seq;
    std::memcpy(block.data(), &bh, sizeof bh);
    std::memcpy(block.data() + kBlockHeaderSize, data + pos, records * kRecordSize);
    pos += records * kRecordSize;
    if ((sel & 4u) || bh.thread >= threads)
      appended += block;
    else
      ring.replace(kBlockSize * (1 + bh.thread), kBlockSize, block);
  }
  if (flags & 2)
    h.data_blocks = appended.size() / kBlockSize;  // (the shim counts its appends: a live reader reads that many)
  std::memcpy(ring.data(), &h, sizeof h);
  const std::string path = scratch_dir() + "/1.0.hlraw";
  write(path, ring);
  std::filesystem::remove(path + ".blocks");
  if (flags & 2) write(path + ".blocks", appended);
  try {
    heaplab::normalise::NormaliseOptions opt;
    opt.codec = heaplab::trace::kCodecNone;
    opt.fallback_ns_per_tick = 0.5;
    if (flags & 16) {
      heaplab::normalise::LiveRawFile raw(path, (flags & 32) != 0);
      heaplab::normalise::normalise_live(
          raw, scratch_dir() + "/out.hlt", opt, [] { return true; }, [] { return nlohmann::json::object(); });
    } else {
      heaplab::normalise::RawFile raw(path);
      heaplab::normalise::normalise(raw, scratch_dir() + "/out.hlt", opt);
    }
  } catch (const heaplab::normalise::RawError&) {
  } catch (const heaplab::trace::TraceError&) {
  }
  return 0;
}
