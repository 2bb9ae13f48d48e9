// The raw capture the LD_PRELOAD shim writes, one pair of files per process
// image, and the normaliser reads:
//
//   PID.GEN.hlraw         FileHeader (kBlockSize bytes), then one block per
//                         slot s at offset kBlockSize*(s+1), a shared file
//                         mapping: a thread's current block (or, with a
//                         live reader, a full one left for it).
//   PID.GEN.hlraw.blocks  full blocks, appended with pwrite(2) in the order
//                         they filled up (kBlockSize each).
//
// A thread writes records into its block in the mapping; when the block is
// full it appends it to .blocks, clears it and starts the next one. Records
// are in the page cache the moment they are written, so every completed
// record survives abort(), SIGSEGV and SIGKILL of the program: the full ones
// in .blocks, the rest in the mapping. (The mapped pages are faulted in once
// per thread and reused: on gVisor-like hosts a page fault costs ~11 us.)
//
// Depends on nothing but <stdint.h>: the shim (libc only) and the normaliser
// both include it. Little-endian, x86-64 / AArch64 layout.
//
// With a live reader consuming (heaplab capture's normaliser), a full block
// is not copied to .blocks: the thread leaves it in the mapping and moves
// to a fresh one (the FreeBlocks the reader gave back, else a new slot).
// The reader reads it there, zeroes its header and the records written,
// and gives it back once every record of it is written (a block a signal
// handler moved its thread off may still lack the record it interrupted:
// raw_live.cpp waits for it).
//
// A block belongs to one thread. It starts with a BlockHeader, then records of
// kRecordSize bytes. A record is complete when its `head` word is non-zero;
// the shim writes `head` last. The heads of a block's unused tail are zero
// (a record's other words may not be, where a thread died writing it: a
// block given back is zeroed only as far as records were written). A record
// with a zero head followed by a complete one is a hole (the thread died
// while writing it).
// A thread's blocks are ordered by thread_block_seq; when a mapped block and
// an appended one have the same seq, the mapped one is the complete copy if
// its magic is set (the shim clears the magic before reusing it).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace heaplab::raw {

inline constexpr char kFileMagic[8] = {'H', 'L', 'R', 'A', 'W', 'C', 'A', 'P'};
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kBlockSize = 65536;      // blocks are this aligned in memory too
inline constexpr uint64_t kBlockHeaderSize = 128;  // also the overflow margin (see shim)
inline constexpr uint64_t kRecordSize = 32;
inline constexpr uint64_t kRecordsPerBlock = (kBlockSize - kBlockHeaderSize) / kRecordSize;
inline constexpr uint64_t kBlocksPerSegment = 64;    // the shim maps 64 thread slots at a time
inline constexpr uint32_t kBlockMagic = 0x4B4C4248;  // "HBLK"
inline constexpr uint64_t kLiveAheadBlocks = 512;    // 32 MiB of appended blocks, at most
// A live capture's scratch disk: the header block, then the mapping's
// slots (it grows a segment at a time): a block for each running thread
// (once a thread has ended, the reader reads its last one and gives it
// back: BlockHeader::exit_word) and the full blocks that wait for the reader, or
// that it gave back; and blocks appended to .blocks until it consumes them.
// While a live reader consumes, the slots stay within kLiveScratchBlocks
// (14 segments: 56 MiB), or the running threads' own and
// kLiveMinAheadBlocks where more threads than that leave no room: a thread
// that needs a block then waits for one the reader gives back
// (live_slots_at_most; a few more slots when new threads start together,
// and more once the reader has stalled for kLiveTimeoutNs, rather than lose
// records). And the blocks that may wait for the reader are fewer with many
// threads (live_ahead_blocks). What is left of 64 MiB is for the blocks
// appended to .blocks before the reader started: about
// kLivePreReaderBlocks (threads racing past the shim's look add one each),
// then the threads wait for the reader to open the file
// (FileHeader::reader_started), kLiveTimeoutNs at most once per process
// image (a reader that never comes; heaplab capture marks the files it will
// not read live as if opened). Before the reader, the mapping takes a slot
// per thread started, unbounded: the bound holds for up to 896 threads
// started before it opens. The `threads` these take are those running
// (FileHeader::threads less threads_ended).
inline constexpr uint64_t kLiveScratchBlocks = 14 * kBlocksPerSegment;
inline constexpr uint64_t kLiveMinAheadBlocks = 64;
inline constexpr uint64_t kLivePreReaderBlocks = 112;  // 7 MiB: header, 896 slots and these within 64 MiB
static_assert((1 + kLiveScratchBlocks + kLivePreReaderBlocks) * kBlockSize < (uint64_t{64} << 20));
// How many full blocks may wait for a live reader while `threads` threads
// have a block each: the shim waits at this many, and the reader counts
// itself behind at three quarters of it.
inline constexpr uint64_t live_ahead_blocks(uint64_t threads) {
  const uint64_t room = kLiveScratchBlocks > threads ? kLiveScratchBlocks - threads : 0;
  return room < kLiveMinAheadBlocks ? kLiveMinAheadBlocks : room > kLiveAheadBlocks ? kLiveAheadBlocks : room;
}
// Thread numbers readers take: below the slots handed out, or below the
// threads counted if more (a thread may start in a block given back, a
// full one or one whose thread ended: sink_file.cpp's claim_slot), but for
// a damaged header no more than kThreadsPastSlotsMax past the slots and the
// blocks a live reader gave back (`given_back`, its own count: a thread
// starts in a new slot or in a block given back).
inline constexpr uint64_t kThreadsPastSlotsMax = 65536;
inline constexpr uint64_t thread_numbers(uint64_t slots, uint64_t threads, uint64_t given_back = 0) {
  const uint64_t most = slots + given_back + kThreadsPastSlotsMax;
  return threads <= slots ? slots : threads > most ? most : threads;
}
// The mapping's slots a live capture of `threads` running threads may use.
inline constexpr uint64_t live_slots_at_most(uint64_t threads) {
  return threads + kLiveMinAheadBlocks > kLiveScratchBlocks ? threads + kLiveMinAheadBlocks : kLiveScratchBlocks;
}
// The threads running: numbered, less those ended (read apart, the two
// may cross for a moment).
inline constexpr uint64_t running_threads(uint32_t threads, uint32_t ended) {
  return threads > ended ? threads - ended : 0;
}
// Long enough for a reader starved of CPU by a program of many busy threads
// (the waiting threads give it the CPU back); a dead reader costs a stop this long.
inline constexpr uint64_t kLiveTimeoutNs = 10000000000;
inline constexpr uint64_t kTicksMask = (uint64_t{1} << 56) - 1;

// FileHeader::clock
enum Clock : uint32_t {
  kClockTsc = 1,        // x86 invariant TSC ticks; rate from the block headers' clock pairs
  kClockMonotonic = 2,  // CLOCK_MONOTONIC nanoseconds
};

// FileHeader::flags
enum FileFlag : uint32_t {
  kFlagCleanExit = 1,  // the process ran its destructors (exit() or return from main)
  kFlagForkChild = 2,  // this process was created by fork() of a captured process
};

// Record ops: the trace format's Op values 0..29 (allocation and release
// calls) keep their numbers; the raw file adds these.
enum RawOp : uint8_t {
  kRawReallocBegin = 40,       // before realloc(old, size): a = old, b = size
  kRawReallocarrayBegin = 41,  // before reallocarray(old, count, size): a = old, b = size, c = count
  kRawLost = 42,               // a = events lost here (written by decoders of the Intel PT route,
                               // from gaps in the events' sequence numbers; never by the shim)
  // The program's own anonymous memory (calls made outside the allocator;
  // trace format 1.1, FORMAT.md section 15). Resident page counts come from
  // mincore(2) just before the memory is released; kUnknownPages if it failed.
  kRawMmap = 43,         // after mmap: a = result, b = length, c = flags | resident pages of the range
                         //   before the call << 32 (MAP_FIXED over memory already mapped)
  kRawMunmap = 44,       // before munmap: a = address, b = length, c = resident pages
  kRawMremapBegin = 45,  // before mremap: a = old address, b = old length, c = resident pages
  kRawMremap = 46,       // after mremap: a = result (0 = failed), b = new length, c = old address
  kRawMadvise = 47,      // before madvise(MADV_DONTNEED or MADV_FREE): a = address, b = length,
                         //   c = advice | resident pages << 8
  kRawBreak = 48,        // after brk/sbrk moved the break: a = old break, b = new break, c = resident
                         //   pages of what a lower break released
  kRawResident = 49,     // resident pages of memory about to be released, or live at exit:
                         //   a = address (a heap block's, or inside a mapping), b = resident
                         //   pages, c = bytes measured from a
  kRawOverhead = 50,     // a = clock ticks this thread has spent so far on capture work the
                         //   shim timed (block appends, mincore)
  kRawLatency = 51,      // right after a call the shim timed inside the allocator (one in
                         //   HEAPLAB_CAPTURE_LATENCY calls): a = its duration in clock ticks
};

inline constexpr uint64_t kUnknownPages = 0xffffffffu;
// Heap blocks and mappings at least this large have their resident pages
// measured when released and at exit (smaller ones are replayed fully touched).
inline constexpr uint64_t kResidentMinBytes = 65536;

inline constexpr bool raw_memory_op(uint32_t op) { return op >= kRawMmap && op <= kRawResident; }

// Fields per record, by op:
//   producing calls (malloc ... new[]_aligned_nothrow): a = result (0 = NULL),
//     b = size, c = alignment (aligned calls) or count (calloc)
//   releasing calls (free, delete ...): a = pointer, b = size (sized deletes),
//     c = alignment (aligned deletes)
//   realloc (after the call): a = result, b = old, c = size
//   reallocarray (after the call): a = result, b = old, c = count
//   kRawRealloc*Begin (before the call): see RawOp
// Allocations are stamped after the real call returns and releases before the
// real call starts, so an address is never seen reused before it was freed.
struct Record {
  uint64_t head;  // ticks << 8 | (op + 1); 0 = not (yet) written
  uint64_t a, b, c;
};
static_assert(sizeof(Record) == kRecordSize);

inline constexpr uint64_t record_head(uint32_t op, uint64_t ticks) { return (ticks & kTicksMask) << 8 | (op + 1u); }
inline constexpr uint32_t record_op(uint64_t head) { return uint32_t(head & 0xff) - 1u; }
inline constexpr uint64_t record_ticks(uint64_t head) { return head >> 8; }

struct BlockHeader {
  uint32_t magic;             // kBlockMagic once the block is claimed
  uint32_t thread;            // the process's thread, 0-based, in order of first event (FileHeader::threads
                              // counts them; a shim before that field numbered a thread by its first slot)
  uint64_t thread_block_seq;  // this block's position among its thread's blocks, 0-based
  uint64_t tid;               // the kernel's thread id
  uint64_t ticks;             // clock pair taken when the block was claimed:
  uint64_t mono_ns;           //   (ticks, CLOCK_MONOTONIC ns)
  char name[16];              // thread name when the block was claimed
  // kBlockLeftFull: full, every record written, and left in the mapping for
  // a live reader while its thread waits for a block given back (atomic):
  // the reader may read it and give it back before the thread has moved on.
  uint32_t left;
  uint32_t reserved32;
  // The thread's end, told by the kernel: a robust futex word. As a thread
  // ends with a live reader (a thread-specific key's destructor), the shim
  // stores its kernel thread id here and links a node of this header's
  // reserved bytes into the thread's robust futex list (set_robust_list(2));
  // when the thread has gone (or exec'd), the kernel sets kExitOwnerDied
  // in this word. Nothing can write the block after that: the reader reads
  // it whole and gives it back. The node is unlinked before the thread
  // leaves the block, the word cleared first; where it cannot be (glibc's
  // own change to the list under way: a signal handler's call), the block
  // is left in the mapping with the word as it is, and readers give it back
  // only once the kernel has marked it (pinned). 0 while not ending.
  uint32_t exit_word;
  uint8_t reserved[kBlockHeaderSize - 68];
};
static_assert(sizeof(BlockHeader) == kBlockHeaderSize);
inline constexpr uint32_t kBlockLeftFull = 1;
inline constexpr uint64_t kExitWordOffset = 64;
static_assert(offsetof(BlockHeader, exit_word) == kExitWordOffset);
inline constexpr uint32_t kExitOwnerDied = 0x40000000;  // FUTEX_OWNER_DIED
// The shim's own note in a block's reserved bytes (after the exit node's,
// sink_file.cpp), which readers ignore: the clock when a signal handler
// moved the thread off the block while its last record was reserved and not
// yet written (the handler's records, in the next block, are stamped after
// it, and the record is stamped no later: sink.h, publish_after_handler).
// Zero otherwise (a block given back, or cleared for reuse, is zeroed).
inline constexpr uint64_t kPendingTicksOffset = 112;
static_assert(kPendingTicksOffset >= kExitWordOffset + 4 && kPendingTicksOffset + 8 <= kBlockHeaderSize);

inline constexpr uint64_t kCmdlineMax = 32768;

struct FileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_size;  // == kBlockSize
  uint32_t block_size;
  uint32_t record_size;
  uint32_t pid;
  uint32_t ppid;
  uint32_t exec_generation;  // 0 for a process's first captured image, then 1, 2 after exec
  uint32_t clock;            // Clock
  uint64_t start_ticks;      // clock pair at start of capture
  uint64_t start_mono_ns;
  uint64_t start_real_ns;  // CLOCK_REALTIME at start
  uint64_t end_ticks;      // clock pair at clean exit (0 if none)
  uint64_t end_mono_ns;
  uint64_t data_blocks;  // blocks appended to .blocks (atomic)
  uint32_t next_thread;  // thread slots handed out (atomic)
  uint32_t flags;        // FileFlag (atomic)
  uint32_t cmdline_len;  // bytes of cmdline used: NUL-separated argv
  uint32_t exe_len;
  // The shim's own cost per event on the fast path, in clock ticks x 1024,
  // measured at start-up (0 = not measured): the normaliser takes it, and
  // the timed costs (kRawOverhead), off each thread's timeline.
  uint64_t event_cost_x1024;
  uint64_t timer_overhead;  // clock ticks a timed call's two fenced reads add (kRawLatency is less it)
  // A live normaliser (heaplab capture) reads blocks while the program runs
  // and deletes the ones it has consumed. It stores CLOCK_MONOTONIC ns here
  // every few ms (0 = none), and counts the blocks it consumed (appended, or
  // read in the mapping and given back: FreeBlocks). The shim waits before
  // appending while live_ahead_blocks(running threads) are unconsumed,
  // unless the heartbeat is older than kLiveTimeoutNs: scratch disk stays
  // bounded.
  uint64_t consumer_ns;      // (atomic)
  uint64_t consumed_blocks;  // (atomic)
  // Capture stopped on an error (a full disk, a file grown past its limit, a
  // descriptor the program closed): the errno (or -1 without one), and the
  // heap calls made afterwards, counted instead of recorded (atomic).
  int64_t stop_error;
  uint64_t dropped_calls;
  uint32_t threads;  // thread numbers handed out (atomic; 0 from a shim before this field)
  // Threads that began to end with a live reader (their exit node linked:
  // BlockHeader::exit_word): no longer counted as running for the live
  // limits (live_ahead_blocks, live_slots_at_most) (atomic).
  uint32_t threads_ended;
  // Non-zero once a live reader that consumes has opened the file, or
  // heaplab capture has given up on one (never cleared; 0 in files of shims
  // before this field): before that the shim appends about
  // kLivePreReaderBlocks, then waits (a futex on its low half) (atomic).
  uint64_t reader_started;
  char exe[4096];             // /proc/self/exe at start
  char cmdline[kCmdlineMax];  // /proc/self/cmdline at start (truncated to fit)
};
static_assert(sizeof(FileHeader) <= kBlockSize);

// Blocks a live reader has read and zeroed, given back for the shim's
// threads to write again (a ring: the reader appends at `tail`, threads take
// at `head` with a compare-and-swap), and the count of full blocks left in
// the mapping for it. In the header block, after the FileHeader.
inline constexpr uint64_t kFreeBlocksMax = 4096;
struct FreeBlocks {
  uint64_t published;  // blocks left in the mapping (atomic; counted with data_blocks; the live reader
                       // adds gone threads' last ones)
  uint64_t head;       // (atomic)
  uint64_t tail;       // (atomic)
  uint64_t reserved;
  uint32_t index[kFreeBlocksMax];  // block slots, 0-based (the block at kBlockSize * (index + 1))
};
inline constexpr uint64_t kFreeBlocksOffset = 40960;
static_assert(sizeof(FileHeader) <= kFreeBlocksOffset);
static_assert(kFreeBlocksOffset + sizeof(FreeBlocks) <= kBlockSize);

// Headers for processes whose raw file could not be set up (a disk full
// before the start, a file size limit, a directory that cannot be written):
// `heaplab capture` hands every process a memfd (HEAPLAB_CAPTURE_SPARE=FD,
// kept open across exec) of kSpareSlots header blocks after a control
// block. Such a process claims a slot, writes its FileHeader there with
// stop_error set, and counts its calls in dropped_calls instead of
// recording them; the launcher turns each slot into a trace holding one
// `lost` event, so that no process's calls vanish without a word.
inline constexpr char kSpareMagic[8] = {'H', 'L', 'S', 'P', 'A', 'R', 'E', '1'};
inline constexpr uint32_t kSpareSlots = 1024;  // (64 MiB of memfd, sparse: a slot costs memory once taken)
struct SpareControl {
  char magic[8];     // kSpareMagic (written by the launcher)
  uint32_t slots;    // kSpareSlots
  uint32_t claimed;  // slots handed out (atomic; may pass `slots`: those got none)
  // Process images not followed whose note in DIR/unfollowed could not be
  // written (a full disk), by kind: counted here instead (atomic).
  uint32_t unnoted_exec;
  uint32_t unnoted_fork;
};
// The memfd's size: the control block, then the slots (slot i at kBlockSize * (i + 1)).
inline constexpr uint64_t kSpareBytes = kBlockSize * (1 + uint64_t(kSpareSlots));

}  // namespace heaplab::raw
