// The file sink (layout in raw_format.h): each thread writes into its own
// block of a shared mapping of DIR/PID.GEN.hlraw; a full block is left in
// the mapping for a live reader (which gives it back, raw::FreeBlocks), or
// appended to PID.GEN.hlraw.blocks with pwrite(2) without one. Thread slots are
// handed out lock-free; mapping a segment of 64 slots and growing the file
// happen under a spin lock, with all signals blocked. libc only.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "capture/shim/rseq_area.h"
#include "capture/shim/shim_util.h"
#include "capture/shim/sink.h"

namespace heaplab::shim {

using namespace heaplab::raw;

__thread ThreadSink t_sink __attribute__((tls_model("initial-exec")));
__thread uint64_t t_overhead __attribute__((tls_model("initial-exec")));
// The thread is ending (thread_ending ran): every block it moves to gets an
// exit node (link_exit_node).
__thread bool t_ending __attribute__((tls_model("initial-exec")));
// The exit node linked into the thread's robust futex list (its `next`
// field, in the current block's header), or nullptr.
__thread void** t_exit_node __attribute__((tls_model("initial-exec")));
uint32_t g_latency_every = 0;
// The fast path's measured cost, once per process; a followed fork child's file gets it too.
uint64_t g_event_cost_x1024 = 0, g_timer_overhead = 0;
__thread uint32_t t_latency_left __attribute__((tls_model("initial-exec")));
uint32_t g_clock = kClockMonotonic;
intptr_t g_rseq_cs_offset = 0;
bool g_capturing = false;
bool g_live_reader_coming = false;
bool g_stopped = false;
pid_t g_launcher = 0;

namespace {

// When the first thread began to wait for a live reader that had not yet
// opened the file (0: none has; wait_for_consumer).
uint64_t g_pre_reader_wait_ns = 0;

constexpr uint64_t kSegmentBytes = kBlocksPerSegment * kBlockSize;
constexpr uint64_t kMaxSegments = 65536;  // 1 TiB of records per process image

int g_fd = -1;
int g_data_fd = -1;
// What the descriptors must still refer to: a program that closes every
// descriptor it did not open (daemons do) and opens others could otherwise
// hand our writes to its own files.
dev_t g_dev = 0;
ino_t g_ino = 0, g_data_ino = 0;

bool same_file(int fd, ino_t ino) {
  struct stat st;
  return fstat(fd, &st) == 0 && st.st_dev == g_dev && st.st_ino == ino;
}

// Moves a descriptor out of the range programs usually use.
int high_fd(int fd) {
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 1000);
  if (moved < 0) return fd;
  close(fd);
  return moved;
}
FileHeader* g_header = nullptr;
char* g_segments[kMaxSegments];         // atomic pointers; (char*)1 = being mapped
uint64_t g_fsize_limit = ~uint64_t{0};  // RLIMIT_FSIZE: never write past it (SIGXFSZ)
pid_t g_pid = 0;                        // the process the sink was opened in

// Capture off first, then the message: nothing the report does may record.
// Calls made from now on are counted in the header (count_dropped).
void stop_capture(const char* what, int err) {
  if (g_header) __atomic_store_n(&g_header->stop_error, err ? int64_t(err) : int64_t(-1), __ATOMIC_RELAXED);
  __atomic_store_n(&g_stopped, true, __ATOMIC_RELAXED);
  __atomic_store_n(&g_capturing, false, __ATOMIC_RELEASE);  // (emit's cold path fences, then reads g_stopped)
  shim_error(what, err);
}
int g_grow_lock = 0;

// Whether process `pid` has ended but not been reaped (a zombie): the
// state letter after the command name in /proc/PID/stat. No allocation.
bool is_zombie(pid_t pid) {
  char path[32] = "/proc/";
  char digits[16];
  int n = 0;
  for (unsigned v = unsigned(pid); v != 0 && n < 15; v /= 10) digits[n++] = char('0' + v % 10);
  size_t at = 6;
  while (n > 0) path[at++] = digits[--n];
  memcpy(path + at, "/stat", 6);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (got <= 0) return false;
  buf[got] = 0;
  const char* paren = strrchr(buf, ')');  // (the command name may hold anything, parentheses too)
  return paren && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

// Whether `heaplab capture` (which reads what we write) has gone: killed,
// it can no longer stop us, and recording on would only fill its disk. The
// program it started has it as its parent until it ends (the kernel hands
// a dead process's children to another at once, reaped or not); other
// processes ask whether it exists and is not a zombie nobody reaped (a
// signal and a /proc read: at most every 50 ms, not for every block).
uint64_t g_launcher_seen_ns = 0;  // when a descendant last found it alive
bool launcher_gone() {
  if (g_launcher <= 0 || getppid() == g_launcher) return false;
  const uint64_t now = mono_ns(), seen = __atomic_load_n(&g_launcher_seen_ns, __ATOMIC_RELAXED);
  if (seen != 0 && now - seen < 50000000) return false;
  if (kill(g_launcher, 0) != 0 && errno == ESRCH) return true;  // (EPERM: it exists)
  if (is_zombie(g_launcher)) return true;
  __atomic_store_n(&g_launcher_seen_ns, now, __ATOMIC_RELAXED);
  return false;
}

uint64_t real_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000u + uint64_t(ts.tv_nsec);
}

void* map_aligned_segment(uint64_t file_offset) {
  // Reserve an over-sized range, then map the file at its kBlockSize-aligned start.
  void* res = mmap(nullptr, kSegmentBytes + kBlockSize, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (res == MAP_FAILED) return nullptr;
  uintptr_t base = (reinterpret_cast<uintptr_t>(res) + kBlockSize - 1) & ~(kBlockSize - 1);
  void* seg = mmap(reinterpret_cast<void*>(base), kSegmentBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, g_fd,
                   off_t(file_offset));
  if (seg == MAP_FAILED) {
    munmap(res, kSegmentBytes + kBlockSize);
    return nullptr;
  }
  uintptr_t head = base - reinterpret_cast<uintptr_t>(res);
  if (head) munmap(res, head);
  uintptr_t tail = kBlockSize - head;
  if (tail) munmap(reinterpret_cast<char*>(base) + kSegmentBytes, tail);
  return seg;
}

// Returns the segment's base address, mapping it (and growing the file) if
// this thread is first. nullptr if the file cannot grow: capture stops, or
// with `soft` (a new slot's block, new_block_if_room: its callers append,
// wait or try otherwise) goes on.
char* segment(uint64_t s, bool soft = false) {
  if (s >= kMaxSegments) return nullptr;
  for (;;) {
    char* p = __atomic_load_n(&g_segments[s], __ATOMIC_ACQUIRE);
    if (p && p != reinterpret_cast<char*>(1)) return p;
    if (p == nullptr) {
      if (!__atomic_load_n(&g_capturing, __ATOMIC_RELAXED)) return nullptr;  // a mapping failed
      char* expect = nullptr;
      if (__atomic_compare_exchange_n(&g_segments[s], &expect, reinterpret_cast<char*>(1), false, __ATOMIC_ACQ_REL,
                                      __ATOMIC_ACQUIRE)) {
        uint64_t off = kBlockSize * (1 + s * kBlocksPerSegment);
        uint64_t need = off + kSegmentBytes;
        while (__atomic_exchange_n(&g_grow_lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
        struct stat st;
        int err = EFBIG;  // past RLIMIT_FSIZE: growing would be a SIGXFSZ in the program
        bool ours = same_file(g_fd, g_ino);
        bool ok = ours && need <= g_fsize_limit && fstat(g_fd, &st) == 0;
        if (!ours) err = EBADF;  // the program closed or replaced our descriptor
        // Allocate the space now: a sparse page written through the mapping
        // on a full disk would be a SIGBUS in the program, not an error here.
        if (ok && uint64_t(st.st_size) < need) {
          int rc = posix_fallocate(g_fd, off_t(off), off_t(kSegmentBytes));
          if (rc != 0) {
            ok = false;
            err = rc;
          }
        } else if (!ok && ours && need <= g_fsize_limit) {
          err = errno;
        }
        __atomic_store_n(&g_grow_lock, 0, __ATOMIC_RELEASE);
        char* seg = ok ? static_cast<char*>(map_aligned_segment(off)) : nullptr;
        if (!seg) {
          if (ok) err = errno;
          if (!soft) stop_capture("cannot grow the raw capture file", err);
          __atomic_store_n(&g_segments[s], nullptr, __ATOMIC_RELEASE);
          return nullptr;
        }
        __atomic_store_n(&g_segments[s], seg, __ATOMIC_RELEASE);
        return seg;
      }
      continue;
    }
    sched_yield();  // another thread is mapping it
    if (!__atomic_load_n(&g_capturing, __ATOMIC_RELAXED)) return nullptr;
  }
}

// A thread's end, told to a live reader by the kernel (raw::BlockHeader::
// exit_word): a node in the block's header, linked first into the thread's
// robust futex list, the list glibc registers for each thread
// (set_robust_list(2)). At the thread's exit the kernel walks that list and
// sets FUTEX_OWNER_DIED in each node's futex word that holds the thread's
// id. A node is glibc's __pthread_list_t {prev, next}, the list's pointers
// point at `next`, and a word is `futex_offset` bytes from them: glibc's
// -32 puts the node at bytes 88..104 of the header. The list's head is in
// glibc's thread descriptor (after the `robust_prev` its first node's
// `prev` may name): found at sink_open, on the main thread, as an offset
// from pthread_self(). With another layout (another C library) nothing is
// linked: threads then keep their last block until the process ends.
constexpr uint64_t kExitNodeNext = kExitWordOffset + 32;
static_assert(kExitNodeNext % 8 == 0 && kExitNodeNext - 8 >= kExitWordOffset + 4 &&
              kExitNodeNext + 8 <= kPendingTicksOffset);
constexpr long kGlibcFutexOffset = -32;
// The head's offset in a thread's descriptor, or -1 (not glibc's layout).
intptr_t g_robust_head_offset = -1;

void find_robust_head() {
  robust_list_head* head = nullptr;
  size_t len = 0;
  if (syscall(SYS_get_robust_list, 0, &head, &len) != 0 || !head || len != sizeof *head) return;
  const intptr_t off = reinterpret_cast<intptr_t>(head) - intptr_t(pthread_self());
  // Inside the descriptor (glibc's struct pthread is about 2 KiB), with its
  // futex offset.
  if (off >= 8 && off < 4096 && head->futex_offset == kGlibcFutexOffset) g_robust_head_offset = off;
}

robust_list_head* robust_head() {
  if (g_robust_head_offset < 0) return nullptr;
  auto* head = reinterpret_cast<robust_list_head*>(intptr_t(pthread_self()) + g_robust_head_offset);
  return head->futex_offset == kGlibcFutexOffset ? head : nullptr;
}

// The thread's exit node into `block`'s header, linked first into its list
// (as glibc links a robust mutex it locks), with signals blocked. Not while
// glibc is inside a change of its own (list_op_pending set around every
// robust lock's and unlock's list change): we are then a signal handler's
// call that interrupted it.
void link_exit_node(char* block) {
  robust_list_head* head = robust_head();
  if (!head || head->list_op_pending) return;
  auto* h = reinterpret_cast<BlockHeader*>(block);
  __atomic_store_n(&h->exit_word, uint32_t(t_sink.tid), __ATOMIC_RELEASE);
  void** next = reinterpret_cast<void**>(block + kExitNodeNext);
  void* first = head->list.next;  // the first node's `next`, or the head itself
  next[0] = first;
  next[-1] = head;
  reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(first) & ~uintptr_t{1})[-1] = next;  // first->prev
  __atomic_signal_fence(__ATOMIC_SEQ_CST);  // the node whole before the head names it
  head->list.next = reinterpret_cast<robust_list*>(next);
  t_exit_node = next;
}

// Before the thread leaves its block (appended and reused, or left to the
// reader, who may give it to another thread): the node out of the list (as
// glibc unlinks a mutex), its word cleared first. False, and the node and
// word left as they are, where it cannot be: glibc inside a change of its
// own (see link_exit_node), or neighbours that no longer name the node (a
// list changed behind our back: a child of a raw fork shares the block).
// The block is then pinned: the caller leaves it in the mapping
// (switch_block), and readers give it back only once the kernel has marked
// its word; the thread links no node again.
bool unlink_exit_node() {
  void** node = t_exit_node;
  if (!node) return true;
  t_exit_node = nullptr;
  void* next = node[0];
  void* prev = node[-1];
  void** next_prev = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(next) & ~uintptr_t{1}) - 1;
  void** prev_next = reinterpret_cast<void**>(reinterpret_cast<uintptr_t>(prev) & ~uintptr_t{1});
  robust_list_head* head = robust_head();
  if (!head || head->list_op_pending || !next || !prev || *prev_next != node || *next_prev != node) {
    t_ending = false;
    return false;
  }
  auto* h = reinterpret_cast<BlockHeader*>(reinterpret_cast<char*>(node) - kExitNodeNext);
  __atomic_store_n(&h->exit_word, 0u, __ATOMIC_RELEASE);  // (the kernel marks only a word holding the id)
  *next_prev = prev;                                      // next->prev
  *prev_next = next;                                      // prev->next
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  node[0] = node[-1] = nullptr;
  return true;
}

void start_block(char* block) {
  ThreadSink& t = t_sink;
  auto* h = reinterpret_cast<BlockHeader*>(block);
  h->thread = t.slot - 1;
  h->thread_block_seq = t.block_seq++;
  h->tid = t.tid;
  h->ticks = stamp();
  h->mono_ns = mono_ns();
  // The thread's name: at its first block and then every 16th (a syscall;
  // programs name their threads soon after starting them).
  if ((t.block_seq - 1) % 16 == 0 || t.block_seq <= 2) prctl(PR_GET_NAME, t.name, 0, 0, 0);
  memcpy(h->name, t.name, sizeof h->name);
  __atomic_store_n(&h->magic, kBlockMagic, __ATOMIC_RELEASE);
  t.cur = reinterpret_cast<uint64_t>(block) + kBlockHeaderSize;
  if (t_ending) link_exit_node(block);  // (a call after the thread's destructors moved it on)
}

// A fresh block in the mapping: a slot number from the counter.
char* claim_mapped_block() {
  uint32_t n = __atomic_add_fetch(&g_header->next_thread, 1u, __ATOMIC_RELAXED);
  char* seg = segment((n - 1) / kBlocksPerSegment);
  return seg ? seg + ((n - 1) % kBlocksPerSegment) * kBlockSize : nullptr;
}

char* new_block_if_room(bool capped = true);
bool live_reader(const FileHeader* h);
char* take_free_block(FileHeader* h);
char* wait_given_back(FileHeader* h);
FreeBlocks* free_blocks(FileHeader* h);

// The threads running: numbered, less those ending (raw::running_threads).
uint64_t running(const FileHeader* h) {
  return running_threads(__atomic_load_n(&h->threads, __ATOMIC_ACQUIRE),
                         __atomic_load_n(&h->threads_ended, __ATOMIC_ACQUIRE));
}

// Whether `slots` are all a live capture may use (raw::live_slots_at_most
// of the running threads). Then at least kLiveMinAheadBlocks of them hold no
// running thread's current block: full ones, or ending threads' last, the
// reader gives back (an ending thread's once it has gone: a thread that
// waits for a block may wait for that, and an ending thread that waits for
// a lock the waiting one holds holds it up until the reader has consumed
// nothing for kLiveTimeoutNs; else the scratch disk would grow by a block
// for every thread ending at once).
bool slot_budget_spent(const FileHeader* h, uint32_t slots) { return slots >= live_slots_at_most(running(h)); }

// A thread-specific key whose destructor (thread_ending) runs as each
// thread ends (but the one that calls exit()), set at its first event. Not
// used where pthread_setspecific could allocate (glibc keeps its first 32
// keys in the thread's descriptor; a key past them takes a calloc, a call
// into this shim): threads then keep their last block until the process ends.
pthread_key_t g_end_key;
bool g_end_key_set = false;

// The thread's first event: its number (in order of first event), and a
// block in the mapping. A thread whose number, less the threads ending,
// passes the slots handed out takes a new slot, so that the slots keep up
// with the running threads (numbers themselves pass the slots: threads start
// in blocks given back, and readers take numbers up to the threads counted,
// raw::thread_numbers); else a block given back, or a new slot within the
// budget (raw::live_slots_at_most); else, with the budget spent, the next
// block the live reader gives back. Where the file cannot grow within the
// budget, as without a reader: capture stops. The thread's end key is set
// (thread_ending).
bool claim_slot() {
  ThreadSink& t = t_sink;
  FileHeader* h = g_header;
  const uint32_t number = __atomic_add_fetch(&h->threads, 1u, __ATOMIC_ACQ_REL);
  char* block = nullptr;
  if (live_reader(h)) {
    const uint64_t now_running = running_threads(number, __atomic_load_n(&h->threads_ended, __ATOMIC_ACQUIRE));
    if (now_running > __atomic_load_n(&h->next_thread, __ATOMIC_ACQUIRE)) block = new_block_if_room(false);
    if (!block) block = take_free_block(h);
    if (!block) block = new_block_if_room(true);
    if (!block && slot_budget_spent(h, __atomic_load_n(&h->next_thread, __ATOMIC_ACQUIRE))) block = wait_given_back(h);
  }
  if (!block && __atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE)) block = claim_mapped_block();
  if (!block) return false;
  t.slot = number;
  t.tid = uint32_t(syscall(SYS_gettid));
  t.block_seq = 0;
  t.block = block;
  start_block(t.block);
  if (g_end_key_set) pthread_setspecific(g_end_key, reinterpret_cast<void*>(1));
  return true;
}

// Whether a record of the full block is reserved but not yet written: we are
// in a signal handler that interrupted an emit() between its reservation and
// its write. (Scanned once per block, instead of counting emit() nesting on
// every event.)
bool write_pending() {
  const auto* r = reinterpret_cast<const Record*>(t_sink.block + kBlockHeaderSize);
  for (uint64_t i = 0; i < kRecordsPerBlock; ++i)
    if (__atomic_load_n(&r[i].head, __ATOMIC_RELAXED) == 0) return true;
  return false;
}

void sleep_until_consumed(FileHeader* h, uint64_t seen);

// A block for a thread to move to: one the live reader gave back, else a
// new slot. With a live reader and no new slot (a file that cannot grow, or
// the scratch disk's budget spent: new_block_if_room), wait for the reader
// to give one back (wait_given_back). nullptr with capture stopped.
char* fresh_block() {
  FileHeader* h = g_header;
  char* block = take_free_block(h);
  if (!block && live_reader(h)) {
    block = new_block_if_room(true);
    if (!block) block = wait_given_back(h);
  } else if (!block) {
    block = claim_mapped_block();
  }
  return block;
}

// In a signal handler that interrupted an emit() whose slot in the full
// block is reserved but not yet written: that block can be neither appended
// nor cleared. Leave it in the mapping (the interrupted write completes it;
// the normaliser reads it there) and move the thread to a fresh block.
bool switch_block() {
  ThreadSink& t = t_sink;
  // The clock now, for the interrupted write's record if it is the full
  // block's last (publish_after_handler): no later than anything this
  // handler stamps in the next block. (A nested handler's switch from this
  // block finds the note taken.)
  auto* note = reinterpret_cast<uint64_t*>(t.block + kPendingTicksOffset);
  if (__atomic_load_n(note, __ATOMIC_RELAXED) == 0) __atomic_store_n(note, stamp(), __ATOMIC_RELAXED);
  unlink_exit_node();  // (left in the mapping either way: pinned or not)
  // A fresh block. Counted as published: the reader gives it back too once
  // its pending write has landed. (Waiting for one, the full block stays:
  // its pending write has not landed.)
  char* block = fresh_block();
  if (!block) return false;
  __atomic_fetch_add(&free_blocks(g_header)->published, 1u, __ATOMIC_RELEASE);
  t.block = block;
  start_block(t.block);
  return true;
}

// Whether a live reader (heaplab capture's normaliser) is consuming blocks:
// its heartbeat is set and younger than kLiveTimeoutNs.
bool reader_alive(const FileHeader* h, uint64_t now) {
  const uint64_t alive = __atomic_load_n(&h->consumer_ns, __ATOMIC_ACQUIRE);
  return alive != 0 && !(now > alive && now - alive > kLiveTimeoutNs);
}

// Whether a live reader is consuming now (no clock read without one).
bool live_reader(const FileHeader* h) {
  return __atomic_load_n(&h->consumer_ns, __ATOMIC_ACQUIRE) != 0 && reader_alive(h, mono_ns());
}

FreeBlocks* free_blocks(FileHeader* h) {
  return reinterpret_cast<FreeBlocks*>(reinterpret_cast<char*>(h) + kFreeBlocksOffset);
}

// A block the live reader has read, zeroed and given back, or nullptr.
char* take_free_block(FileHeader* h) {
  FreeBlocks* f = free_blocks(h);
  uint64_t head = __atomic_load_n(&f->head, __ATOMIC_ACQUIRE);
  for (;;) {
    const uint64_t tail = __atomic_load_n(&f->tail, __ATOMIC_ACQUIRE);
    if (head >= tail) return nullptr;
    const uint32_t index = __atomic_load_n(&f->index[head % kFreeBlocksMax], __ATOMIC_RELAXED);
    if (__atomic_compare_exchange_n(&f->head, &head, head + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      if (index >= __atomic_load_n(&h->next_thread, __ATOMIC_ACQUIRE)) return nullptr;  // (never handed out)
      char* seg = segment(index / kBlocksPerSegment);
      return seg ? seg + (index % kBlocksPerSegment) * kBlockSize : nullptr;
    }
  }
}

// A block given back by the live reader, waiting for one while it consumes
// (asleep until it counts another consumed block, 50 ms at most a look). The
// thread's full block is marked left first, so that the reader may take it
// back too (else, with every other block taken, the two would wait on each
// other). See wait_given_back: nullptr with capture stopped once the reader
// has gone or stalled and the file cannot grow (the block is the reader's
// now, and without disk space there is nowhere else to put the records).
char* wait_free_block(FileHeader* h, char* full) {
  __atomic_store_n(&reinterpret_cast<BlockHeader*>(full)->left, 1u, __ATOMIC_RELEASE);
  return wait_given_back(h);
}

// A block given back by the live reader, asleep until it gives one (50 ms at
// most a look), or a new slot once there may be one (the slots a live
// capture may use grow with its threads). With the reader gone, or
// consuming nothing for kLiveTimeoutNs, a new slot beyond that budget.
// nullptr with capture stopped: that failed too (the file cannot grow), or
// another thread stopped it.
char* wait_given_back(FileHeader* h) {
  uint64_t since = mono_ns();
  uint64_t seen = __atomic_load_n(&h->consumed_blocks, __ATOMIC_ACQUIRE);
  // A new slot is tried again once the threads, and so the budget, grew
  // (not at every look: that takes the lock that grows the file; a file
  // that can grow again is noticed then, or after kLiveTimeoutNs).
  uint32_t threads_tried = 0;
  for (;;) {
    if (!__atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE)) return nullptr;
    const uint64_t consumed = __atomic_load_n(&h->consumed_blocks, __ATOMIC_ACQUIRE);
    if (char* block = take_free_block(h)) return block;
    const uint64_t now = mono_ns();
    const bool alive = reader_alive(h, now) && !launcher_gone();
    const uint32_t threads = __atomic_load_n(&h->threads, __ATOMIC_ACQUIRE);
    if (threads != threads_tried) {
      threads_tried = threads;
      if (char* block = new_block_if_room(true)) return block;
    }
    if (consumed != seen) {  // the reader is consuming: wait on
      seen = consumed;
      since = now;
    }
    if (!alive || now - since > kLiveTimeoutNs) {
      // Past the scratch budget rather than lose the records.
      if (char* block = new_block_if_room(false)) return block;
      stop_capture("cannot grow the raw capture file, and the live reader gave no block back", ENOSPC);
      return nullptr;
    }
    sleep_until_consumed(h, consumed);
  }
}

// A new slot's block, taken only once its segment is mapped (so that every
// slot counted in next_thread has its block); nullptr if the file cannot
// grow (capture goes on), or, `capped`, if its slots are as many as a live
// capture may use (raw::live_slots_at_most: scratch disk stays bounded).
char* new_block_if_room(bool capped) {
  FileHeader* h = g_header;
  for (uint32_t n = __atomic_load_n(&h->next_thread, __ATOMIC_ACQUIRE);;) {
    if (capped && slot_budget_spent(h, n)) return nullptr;
    char* seg = segment(n / kBlocksPerSegment, true);
    if (!seg) return nullptr;
    if (__atomic_compare_exchange_n(&h->next_thread, &n, n + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
      return seg + (n % kBlocksPerSegment) * kBlockSize;
  }
}

// The thread's block is full and a live reader is consuming: leave the block
// in the mapping for it (no copy; it reads the block there, zeroes it and
// gives it back) and move to a fresh one. False (the caller appends the
// block to .blocks instead) without a live reader or a fresh block.
bool publish_block() {
  ThreadSink& t = t_sink;
  FileHeader* h = g_header;
  if (!live_reader(h)) return false;
  char* block = take_free_block(h);
  // Else a new slot. A file that cannot grow (a full disk), or the slots a
  // live capture may use all taken (raw::live_slots_at_most): wait for the
  // reader to give a block back (copying would need disk space too, and
  // blocks given back free none).
  if (!block) block = new_block_if_room(true);
  if (!block) {
    block = wait_free_block(h, t.block);
    if (!block) return false;  // (capture stopped)
  }
  __atomic_fetch_add(&free_blocks(h)->published, 1u, __ATOMIC_RELEASE);
  t.block = block;
  start_block(t.block);
  return true;
}

// Sleeps until the reader counts another consumed block (it wakes the
// count's futex, the low half of the 64-bit count: one waiter a block), or
// 50 ms at most (to look at the reader's heartbeat). Not shorter: with
// hundreds of threads waiting, each waking every 5 ms took the CPU the
// reader needed (`churn 512 4000` captured live 2x slower).
// Sleeps on the low half of a header word the reader wakes while it still
// holds `seen`, 50 ms at most.
void sleep_on(uint64_t* word, uint64_t seen) {
  timespec ts{0, 50000000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, uint32_t(seen), &ts, nullptr, 0);
}

void sleep_until_consumed(FileHeader* h, uint64_t seen) { sleep_on(&h->consumed_blocks, seen); }

// A live normaliser consumes appended blocks while the program runs: wait
// while it is live_ahead_blocks behind, so that scratch disk stays bounded,
// but never for one that stopped answering.
// (Called with signals open, so that Ctrl-C is not held up; the wait is the
// shim's cost: the caller times it.)
// The header is looked up again at every round: a handler that forked
// while this thread slept leaves its child here with the parent's header
// unmapped (sink_after_fork), and the child's own, or none.
// Before the live reader that is coming has opened the file (the launcher
// looks for new raw files every 10 ms, later on a loaded machine), about
// kLivePreReaderBlocks are appended (a thread or so more where threads race
// past the look); then the threads wait for it, but kLiveTimeoutNs at most
// in all in this process image (g_pre_reader_wait_ns: when the first began;
// a fork child starts afresh), never again once that has passed, and not
// once the launcher is known to have gone.
void wait_for_consumer() {
  if (t_ending) return;  // (about to end: never held back)
  for (;;) {
    FileHeader* h = __atomic_load_n(&g_header, __ATOMIC_ACQUIRE);
    if (!h) return;
    if (__atomic_load_n(&h->consumer_ns, __ATOMIC_ACQUIRE) == 0) {  // no reader: no clock read, unless
      if (!g_live_reader_coming || __atomic_load_n(&h->reader_started, __ATOMIC_ACQUIRE) != 0 ||
          __atomic_load_n(&h->data_blocks, __ATOMIC_RELAXED) < kLivePreReaderBlocks)
        return;
      // (A raw clone's child shares the mapping: its records are not kept,
      // emit_slow stops it next.)
      if (pid_t(syscall(SYS_getpid)) != g_pid) return;
      const uint64_t now = mono_ns();
      uint64_t since = 0;
      // (Another thread may have begun a moment after this one read the clock.)
      if (!__atomic_compare_exchange_n(&g_pre_reader_wait_ns, &since, now, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
          now > since && now - since > kLiveTimeoutNs)
        return;
      if (launcher_gone()) return;
      // Asleep on the mark itself (the reader, or heaplab capture giving up
      // on one, sets it and wakes it: a store between the look above and
      // the sleep makes the sleep return at once), 50 ms at most a look.
      sleep_on(&h->reader_started, 0);
      continue;
    }
    const uint64_t appended = __atomic_load_n(&h->data_blocks, __ATOMIC_RELAXED) +
                              __atomic_load_n(&free_blocks(h)->published, __ATOMIC_RELAXED);
    const uint64_t consumed = __atomic_load_n(&h->consumed_blocks, __ATOMIC_ACQUIRE);
    if (appended < consumed + live_ahead_blocks(running(h))) return;
    if (!reader_alive(h, mono_ns()) || launcher_gone()) return;
    // Asleep, not spinning: hundreds of threads waiting must not take the CPU the reader needs.
    sleep_until_consumed(h, consumed);
  }
}

// The disk is full: if a live reader is consuming blocks (and giving their
// space back), wait until it has consumed another one. False if there is no
// reader, or it consumed nothing for kLiveTimeoutNs.
bool space_freed() {
  FileHeader* h = g_header;
  const uint64_t before = __atomic_load_n(&h->consumed_blocks, __ATOMIC_ACQUIRE);
  const uint64_t start = mono_ns();
  for (;;) {
    const uint64_t now = mono_ns();
    if (!reader_alive(h, now) || now - start > kLiveTimeoutNs) return false;
    const uint64_t consumed = __atomic_load_n(&h->consumed_blocks, __ATOMIC_ACQUIRE);
    if (consumed != before) return true;
    sleep_until_consumed(h, consumed);
  }
}

// The thread's block is full: leave it for a live reader and start the next
// in a fresh block (publish_block), or append it to .blocks, clear it and
// start the next in it.
bool next_block() {
  ThreadSink& t = t_sink;
  if (!unlink_exit_node()) return switch_block();  // pinned: never reused in place nor given back
  if (launcher_gone()) {                           // nobody will read a count: none is kept
    __atomic_store_n(&g_capturing, false, __ATOMIC_RELEASE);
    shim_error("heaplab capture has gone (killed?): recording stopped; the program runs on", 0);
    return false;
  }
  if (!same_file(g_data_fd, g_data_ino)) {
    stop_capture("the program closed or replaced the capture's file descriptor; capture stopped", 0);
    return false;
  }
  if (publish_block()) return true;
  if (!__atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE)) return false;  // (stopped while publishing)
  uint64_t index = __atomic_fetch_add(&g_header->data_blocks, 1u, __ATOMIC_RELAXED);
  if ((index + 1) * kBlockSize > g_fsize_limit) {  // past RLIMIT_FSIZE: SIGXFSZ would kill the program
    stop_capture("cannot append to the raw capture file", EFBIG);
    return false;
  }
  uint64_t done = 0;
  while (done < kBlockSize) {
    ssize_t n = pwrite(g_data_fd, t.block + done, kBlockSize - done, off_t(index * kBlockSize + done));
    const int err = n < 0 ? errno : ENOSPC;  // (space_freed's futex wait sets errno)
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == ENOSPC || err == EDQUOT) && space_freed()) continue;
    if (n <= 0) {
      stop_capture("cannot append to the raw capture file", err);
      return false;
    }
    done += uint64_t(n);
  }
  // Clear the magic first: a copy in the mapping without it is never read.
  // (The fence keeps the clearing stores after it on weakly ordered CPUs too.)
  __atomic_store_n(&reinterpret_cast<BlockHeader*>(t.block)->magic, 0u, __ATOMIC_RELEASE);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  memset(t.block + sizeof(uint32_t), 0, kBlockSize - sizeof(uint32_t));
  start_block(t.block);
  return true;
}

void read_proc_file(const char* path, char* buf, uint64_t cap, uint32_t* len) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  uint64_t n = 0;
  if (fd >= 0) {
    while (n < cap) {
      ssize_t r = read(fd, buf + n, cap - n);
      if (r <= 0) break;
      n += uint64_t(r);
    }
    close(fd);
  }
  *len = uint32_t(n);
}

}  // namespace

void count_dropped(uint32_t op) {
  FileHeader* h = __atomic_load_n(&g_header, __ATOMIC_ACQUIRE);
  if (h && op < kRawReallocBegin) __atomic_fetch_add(&h->dropped_calls, 1u, __ATOMIC_RELAXED);
}

void emit_slow(uint32_t op, uint64_t a, uint64_t b, uint64_t c) {
  const int saved_errno = errno;  // the program's call must not see ours (free keeps errno)
  uint64_t t0 = stamp();
  // A full block (not the thread's first): wait for a live reader first.
  if (t_sink.slot != 0 && __atomic_load_n(&g_capturing, __ATOMIC_RELAXED)) wait_for_consumer();
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  ThreadSink& t = t_sink;
  // A child made by a raw fork/clone (no atfork handlers) still shares our
  // mapping: it must stop writing at once.
  if (g_capturing && pid_t(syscall(SYS_getpid)) != g_pid) {
    __atomic_store_n(&g_capturing, false, __ATOMIC_RELAXED);
    t.cur = 0;
  }
  // A signal handler may have started a fresh block since our reservation failed.
  if ((t.cur & (kBlockSize - 1)) < kBlockHeaderSize) {
    const bool moved = g_capturing && (t.slot == 0 ? claim_slot() : write_pending() ? switch_block() : next_block());
    if (!moved) t.cur = 0;
  }
  if (!t.cur && __atomic_load_n(&g_stopped, __ATOMIC_ACQUIRE)) count_dropped(op);  // this one too
  if (t.cur) {
    // Stamped now that it has a place, not when the call came in: a live
    // reader that polled meanwhile (while the thread waited, appended its
    // block, or, at its first call, took its number) took the thread for
    // caught up to that poll, or did not know it, and may have written other
    // threads' records stamped since. (An allocation's stamp is still after
    // its call returned, a release's before its call starts.) The block
    // switch's cost goes first, so that the record keeps its place on the
    // program's own timeline (the normaliser takes off the cost recorded
    // before a record).
    const auto put = [&t](uint32_t o, uint64_t ra, uint64_t rb, uint64_t rc) {
      auto* r = reinterpret_cast<Record*>(t.cur);
      t.cur += kRecordSize;
      r->a = ra;
      r->b = rb;
      r->c = rc;
      publish(r, o);
    };
    // (Room for both: a fresh block, or one a handler started while we waited.)
    if (op != kRawOverhead && (t.cur & (kBlockSize - 1)) + 2 * kRecordSize <= kBlockSize) {
      const uint64_t t1 = stamp();
      t_overhead += t1 - t0;
      t0 = t1;
      put(kRawOverhead, t_overhead, 0, 0);
    }
    put(op, a, b, c);
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // The rest of the slow path is the shim's cost too, not the program's.
  if (t.cur && op != kRawOverhead) note_overhead(t0);
  errno = saved_errno;
}

namespace {

// A thread is ending (g_end_key's destructor; C++ thread_local destructors
// have run). With a live reader, its block gets an exit node: once the
// kernel has seen the thread go, the reader reads the block and gives it
// back, so that a program whose threads come and go does not keep a block
// for every thread it ever ran. Calls the thread makes after this (other
// destructors, glibc's own clean-up) go on in the same block, or take the
// node along to the next (start_block). Without a reader nobody would give
// the block back: nothing is linked; but before a live reader that is
// coming has started (g_live_reader_coming) it is, so that the reader finds
// the thread gone at its first look: not doing so wrote the thread_end of
// every thread that ended in the program's first milliseconds at the end of
// the trace, and a replay ran those threads all at once (plan.h,
// kStepNewThread). (The thread that calls exit(), main's usually, runs no
// key destructors: its block is read at the end.)
void thread_ending(void*) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  ThreadSink& t = t_sink;
  FileHeader* h = __atomic_load_n(&g_header, __ATOMIC_ACQUIRE);
  if (h && __atomic_load_n(&g_capturing, __ATOMIC_ACQUIRE) && t.slot != 0 && t.block && !t_ending &&
      pid_t(syscall(SYS_getpid)) == g_pid &&
      (live_reader(h) || (g_live_reader_coming && __atomic_load_n(&h->consumer_ns, __ATOMIC_ACQUIRE) == 0))) {
    t_ending = true;
    link_exit_node(t.block);
    if (t_exit_node) {
      // No longer running, for the wait limit and the slot budget: at once,
      // not once the reader catches up. (Its last block is not counted as
      // waiting for the reader until the reader finds the thread gone:
      // counted now, threads at the wait limit would wait for this one's
      // end, which may wait for them.)
      __atomic_fetch_add(&h->threads_ended, 1u, __ATOMIC_ACQ_REL);
    } else {
      t_ending = false;
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void sink_set_event_cost(uint64_t ticks_x1024, uint64_t timer_overhead) {
  g_event_cost_x1024 = ticks_x1024;
  g_timer_overhead = timer_overhead;
  if (!g_header) return;
  g_header->event_cost_x1024 = ticks_x1024;
  g_header->timer_overhead = timer_overhead;
}

bool sink_first_image(const char* dir) {
  char path[4096], marker[4096];
  if (!format_path(path, sizeof path, dir, uint32_t(getpid()), 0)) return false;
  if (!format_path(marker, sizeof marker, dir, uint32_t(getpid()), 0, ".ptw")) return false;
  return access(path, F_OK) != 0 && access(marker, F_OK) != 0;
}

namespace {

int g_spare_fd = -1;   // heaplab capture's spare header slots (raw_format.h, SpareControl), or -1
bool g_spare = false;  // this image's header is in a spare slot

// This process image's header, the magic last (the file is then valid).
void fill_header(FileHeader& fh, const SinkConfig& cfg, uint32_t gen) {
  fh.version = kVersion;
  fh.header_size = uint32_t(kBlockSize);
  fh.block_size = uint32_t(kBlockSize);
  fh.record_size = uint32_t(kRecordSize);
  fh.pid = uint32_t(getpid());
  fh.ppid = uint32_t(getppid());
  fh.exec_generation = gen;
  fh.clock = g_clock;
  fh.flags = cfg.fork_child ? uint32_t(kFlagForkChild) : 0u;
  read_proc_file("/proc/self/cmdline", fh.cmdline, kCmdlineMax, &fh.cmdline_len);
  ssize_t n = readlink("/proc/self/exe", fh.exe, sizeof fh.exe - 1);
  fh.exe_len = n > 0 ? uint32_t(n) : 0;
  fh.start_ticks = stamp();
  fh.start_mono_ns = mono_ns();
  fh.start_real_ns = real_ns();
  fh.event_cost_x1024 = g_event_cost_x1024;  // a fork child's: measured in the parent
  fh.timer_overhead = g_timer_overhead;
  memcpy(fh.magic, kFileMagic, sizeof fh.magic);  // last: the file is now valid
  __atomic_thread_fence(__ATOMIC_RELEASE);
}

// heaplab capture's spare control block, mapped (munmap it, kBlockSize), or
// nullptr: no spare memfd, or the descriptor is not it (the program closed
// or replaced it: a file the program put at this number is never mapped,
// and a block without the control block's magic is unmapped again).
SpareControl* map_spare_control() {
  if (g_spare_fd < 0) return nullptr;
  struct stat st;
  if (fstat(g_spare_fd, &st) != 0 || !S_ISREG(st.st_mode) || uint64_t(st.st_size) != kSpareBytes) return nullptr;
  void* c = mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_SHARED, g_spare_fd, 0);
  if (c == MAP_FAILED) return nullptr;
  auto* ctl = static_cast<SpareControl*>(c);
  if (memcmp(ctl->magic, kSpareMagic, sizeof ctl->magic) != 0 || ctl->slots > kSpareSlots) {
    munmap(c, kBlockSize);
    return nullptr;
  }
  return ctl;
}

// The raw file could not be set up (`err`): the header goes into a slot of
// heaplab capture's spare memfd instead, with capture stopped from the
// start, so that every heap call of this image is counted there (and the
// launcher writes a trace saying how many were lost). False without a
// spare: not started by heaplab capture, the program closed or replaced the
// descriptor (its control block is checked first), or every slot taken.
bool open_spare(const SinkConfig& cfg, uint32_t gen, int err) {
  SpareControl* ctl = map_spare_control();
  if (!ctl) return false;
  const uint32_t slot = __atomic_fetch_add(&ctl->claimed, 1u, __ATOMIC_ACQ_REL);
  const uint32_t slots = ctl->slots;
  munmap(ctl, kBlockSize);
  if (slot >= slots) return false;
  void* h = mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_SHARED, g_spare_fd, off_t(kBlockSize * (slot + 1)));
  if (h == MAP_FAILED) return false;
  g_pid = getpid();
  g_header = static_cast<FileHeader*>(h);
  g_header->stop_error = err ? int64_t(err) : int64_t(-1);
  fill_header(*g_header, cfg, gen);
  t_sink = ThreadSink{};
  g_spare = true;
  __atomic_store_n(&g_stopped, true, __ATOMIC_RELAXED);
  __atomic_store_n(&g_capturing, false, __ATOMIC_RELEASE);
  shim_error("this process's heap calls are counted, not recorded: heaplab capture reports them as lost", 0);
  return true;
}

// Capture cannot start in this image: a message, then a spare header if
// there is one. The empty raw file stays (an image exec'd later tells by
// it that it is not the process's first; heaplab removes it), its empty
// .blocks goes.
bool not_started(const SinkConfig& cfg, uint32_t gen, int err, const char* data_path = nullptr) {
  if (!open_spare(cfg, gen, err)) return false;
  if (data_path) unlink(data_path);
  return true;
}

}  // namespace

void sink_set_spare(int fd) { g_spare_fd = fd; }

void sink_count_unnoted(bool exec) {
  if (SpareControl* ctl = map_spare_control()) {
    __atomic_fetch_add(exec ? &ctl->unnoted_exec : &ctl->unnoted_fork, 1u, __ATOMIC_RELAXED);
    munmap(ctl, kBlockSize);
  }
}

namespace {

// find_rseq_cs_offset(), looked up once (a fork child keeps it).
intptr_t rseq_cs_offset() {
  static const intptr_t found = find_rseq_cs_offset();
  return found;
}

}  // namespace

bool sink_open(const SinkConfig& cfg) {
  g_clock = cfg.tsc ? kClockTsc : kClockMonotonic;
  g_rseq_cs_offset = cfg.tsc ? rseq_cs_offset() : 0;
  struct rlimit lim;
  g_fsize_limit =
      getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY ? uint64_t(lim.rlim_cur) : ~uint64_t{0};
  if (g_fsize_limit < kBlockSize * (1 + kBlocksPerSegment)) {
    shim_error("file size limit (ulimit -f) too small for a capture; not capturing", 0);
    return not_started(cfg, 0, EFBIG);
  }
  char path[4096];
  uint32_t gen = 0;
  int fd = create_image_file(cfg.dir, ".hlraw", O_RDWR, path, sizeof path, &gen);
  if (fd == -2) {
    shim_error("raw capture directory path too long", 0);
    return not_started(cfg, gen, ENAMETOOLONG);
  }
  if (fd < 0) {
    const int err = errno;
    shim_error_path("cannot create raw capture file", path, err);
    return not_started(cfg, gen, err);
  }
  char data_path[4096 + 8];
  uint64_t dn = 0;
  data_path[0] = 0;
  append(data_path, sizeof data_path, &dn, path);
  append(data_path, sizeof data_path, &dn, ".blocks");
  int data_fd = open(data_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (data_fd < 0) {
    const int err = errno;
    shim_error_path("cannot create raw capture file", data_path, err);
    close(fd);
    return not_started(cfg, gen, err);
  }
  // The header page's disk space now: a sparse page written through the
  // mapping on a full disk would be a SIGBUS in the program.
  if (int rc = posix_fallocate(fd, 0, off_t(kBlockSize)); rc != 0) {
    shim_error_path("cannot size raw capture file", path, rc);
    close(fd);
    close(data_fd);
    return not_started(cfg, gen, rc, data_path);
  }
  void* h = mmap(nullptr, kBlockSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (h == MAP_FAILED) {
    const int err = errno;
    shim_error_path("cannot map raw capture file", path, err);
    close(fd);
    close(data_fd);
    return not_started(cfg, gen, err, data_path);
  }
  g_pid = getpid();
  g_fd = high_fd(fd);
  g_data_fd = high_fd(data_fd);
  struct stat st;
  if (fstat(g_fd, &st) == 0) {
    g_dev = st.st_dev;
    g_ino = st.st_ino;
  }
  if (fstat(g_data_fd, &st) == 0) g_data_ino = st.st_ino;
  g_header = static_cast<FileHeader*>(h);
  fill_header(*g_header, cfg, gen);
  t_sink = ThreadSink{};
  // Once per process (a fork child inherits the key).
  if (!g_end_key_set) {
    find_robust_head();
    if (g_robust_head_offset >= 0 && pthread_key_create(&g_end_key, thread_ending) == 0) {
      g_end_key_set = g_end_key < 32;
      if (!g_end_key_set) pthread_key_delete(g_end_key);
    }
  }
  g_capturing = true;
  return true;
}

void sink_after_fork(bool follow, const char* dir) {
  // The child must never write into the parent's mapping; its timeline
  // starts without the parent's costs.
  g_capturing = false;
  g_stopped = false;
  g_spare = false;
  g_pre_reader_wait_ns = 0;  // (its own file, its own reader)
  t_sink = ThreadSink{};
  t_ending = false;  // (glibc empties the child's robust list)
  t_exit_node = nullptr;
  t_overhead = 0;
  t_latency_left = 0;
  for (uint64_t s = 0; s < kMaxSegments; ++s) {
    if (!g_segments[s]) continue;
    if (g_segments[s] != reinterpret_cast<char*>(1)) munmap(g_segments[s], kSegmentBytes);
    g_segments[s] = nullptr;
  }
  if (g_header) munmap(g_header, kBlockSize);
  g_header = nullptr;
  if (g_fd >= 0) close(g_fd);
  if (g_data_fd >= 0) close(g_data_fd);
  g_fd = g_data_fd = -1;
  g_grow_lock = 0;
  if (follow) sink_open(SinkConfig{dir, g_clock == kClockTsc, true});
}

void sink_close() {
  if (!g_header || (!g_capturing && !g_spare)) return;
  g_header->end_ticks = stamp();
  g_header->end_mono_ns = mono_ns();
  __atomic_fetch_or(&g_header->flags, kFlagCleanExit, __ATOMIC_RELEASE);
  // Recording continues: destructors that run after this one still allocate.
}

}  // namespace heaplab::shim
