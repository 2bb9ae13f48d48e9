#include "capture/format/mapping_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace heaplab::trace {

namespace {

constexpr size_t kSlots = 64;
constexpr size_t kMessage = 512;

// A slot is changed only under g_mu, between two steps of its seq (odd
// while it changes); the handler reads it whole between two equal even
// seqs (a seqlock), so that a slot taken over for another mapping while a
// fault reads it gives neither the other's length nor half its message.
struct Slot {
  std::atomic<uint64_t> seq{0};
  std::atomic<uintptr_t> base{0};  // 0: free
  std::atomic<size_t> len{0};
  char message[kMessage];
  std::atomic<size_t> message_len{0};
  char report[kMessage];  // also written to report_fd (guard_mapping_report)
  std::atomic<size_t> report_len{0};
  std::atomic<int> report_fd{-1};
};

Slot g_slots[kSlots];
std::mutex g_mu;  // registrations (the handler only reads)
struct sigaction g_previous;
bool g_installed = false;
std::atomic<bool> g_said{false};  // one thread says it (several can fault at once)

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

// What the handler read of a slot that guards the faulting address.
struct Found {
  char message[kMessage];
  size_t message_len;
  char report[kMessage];
  size_t report_len;
  int report_fd;
};

// Whether slot `s` guards `addr`, read whole (into *f if so).
bool guards(Slot& s, uintptr_t addr, Found* f) {
  for (;;) {
    const uint64_t before = s.seq.load(std::memory_order_acquire);
    if (before & 1) continue;  // (being changed by a thread that holds g_mu: not this one, which faulted)
    const uintptr_t base = s.base.load(std::memory_order_relaxed);
    const size_t len = s.len.load(std::memory_order_relaxed);
    const bool ours = base != 0 && addr - base < len;
    if (ours) {
      f->message_len = std::min(s.message_len.load(std::memory_order_relaxed), kMessage);
      f->report_len = std::min(s.report_len.load(std::memory_order_relaxed), kMessage);
      f->report_fd = s.report_fd.load(std::memory_order_relaxed);
      std::copy_n(s.message, f->message_len, f->message);
      std::copy_n(s.report, f->report_len, f->report);
    }
    // (A read-modify-write, release: the reads above stay before it; no
    // fence, which TSan does not take.)
    if (s.seq.fetch_add(0, std::memory_order_acq_rel) == before) return ours;
  }
}

void on_sigbus(int, siginfo_t* info, void*) {
  // A fault at an address of a guarded mapping past its file's end (the
  // kernel's BUS_ADRERR; not a SIGBUS another process sent, nor a memory
  // error. A read error of the file's pages comes as BUS_ADRERR too, and is
  // said as the file cut short.)
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  Found f;  // (on the signal's stack: about 1 KiB)
  if (info->si_code == BUS_ADRERR)
    for (Slot& s : g_slots) {
      if (!guards(s, addr, &f)) continue;
      if (!g_said.exchange(true)) {
        // Said once: on the report's descriptor where there is one (whose
        // reader says it), else on stderr.
        if (f.report_fd < 0 || !write_all(f.report_fd, f.report, f.report_len))
          write_all(STDERR_FILENO, f.message, f.message_len);
        ::_exit(2);
      }
      for (;;) pause();  // (another thread is saying it and ending the process)
    }
  // Not one of ours: as before this handler. A fault repeats once its
  // instruction runs again; a signal sent is raised again (blocked until
  // this handler returns).
  sigaction(SIGBUS, &g_previous, nullptr);
  // (Not from the faulting instruction: sent, the kernel's own, or an
  // asynchronous memory error.)
  if (info->si_code <= 0 || info->si_code == SI_KERNEL || info->si_code == BUS_MCEERR_AO) raise(SIGBUS);
}

// A slot's seq odd for the change in its scope (g_mu held).
struct Changing {
  Slot& s;
  // (acq_rel: the changes below stay after the step to odd.)
  explicit Changing(Slot& slot) : s(slot) { s.seq.fetch_add(1, std::memory_order_acq_rel); }
  ~Changing() { s.seq.fetch_add(1, std::memory_order_release); }
  Changing(const Changing&) = delete;
  Changing& operator=(const Changing&) = delete;
};

// Up to kMessage bytes of `text` into `to` (not a C string: written by
// length); one cut short still ends its line.
size_t copy_text(char* to, const std::string& text) {
  const size_t n = std::min(text.size(), kMessage);
  std::copy_n(text.data(), n, to);
  if (n == kMessage) to[n - 1] = '\n';
  return n;
}

}  // namespace

void guard_mapping(const void* base, size_t len, const std::string& path) {
  if (base == nullptr || len == 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_installed) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_previous) != 0) return;
    g_installed = true;
  }
  for (Slot& s : g_slots) {
    if (s.base.load(std::memory_order_relaxed) != 0) continue;
    // (On a terminal, over whatever progress line was being drawn.)
    const std::string m =
        std::string(isatty(STDERR_FILENO) ? "\r\033[K" : "") + "heaplab: error: " + path + ": " + kShrankText + "\n";
    Changing c(s);
    s.message_len.store(copy_text(s.message, m), std::memory_order_relaxed);
    s.report_len.store(0, std::memory_order_relaxed);
    s.report_fd.store(-1, std::memory_order_relaxed);
    s.len.store(len, std::memory_order_relaxed);
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_relaxed);
    return;
  }
}

void guard_mapping_report(const void* base, int fd, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      Changing c(s);
      s.report_len.store(copy_text(s.report, text), std::memory_order_relaxed);
      s.report_fd.store(fd, std::memory_order_relaxed);
    }
}

void unguard_mapping(const void* base) {
  if (base == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      Changing c(s);
      s.base.store(0, std::memory_order_relaxed);
      s.report_fd.store(-1, std::memory_order_relaxed);
      s.message_len.store(0, std::memory_order_relaxed);
      s.report_len.store(0, std::memory_order_relaxed);
      s.len.store(0, std::memory_order_relaxed);
    }
}

}  // namespace heaplab::trace
