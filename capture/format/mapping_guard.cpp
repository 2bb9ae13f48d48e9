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

struct Slot {
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

void on_sigbus(int, siginfo_t* info, void*) {
  // A fault at an address of a guarded mapping past its file's end (the
  // kernel's BUS_ADRERR; not a SIGBUS another process sent, nor a memory
  // error. A read error of the file's pages comes as BUS_ADRERR too, and is
  // said as the file cut short.)
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code == BUS_ADRERR)
    for (Slot& s : g_slots) {
      const uintptr_t base = s.base.load(std::memory_order_acquire);
      if (base == 0 || addr - base >= s.len.load(std::memory_order_relaxed)) continue;
      if (!g_said.exchange(true)) {
        // Said once: on the report's descriptor where there is one (whose
        // reader says it), else on stderr.
        const int fd = s.report_fd.load(std::memory_order_acquire);
        if (fd < 0 || !write_all(fd, s.report, s.report_len.load(std::memory_order_acquire)))
          write_all(STDERR_FILENO, s.message, s.message_len.load(std::memory_order_acquire));
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
    s.message_len.store(copy_text(s.message, m), std::memory_order_release);
    s.report_fd.store(-1, std::memory_order_release);
    s.len.store(len, std::memory_order_relaxed);
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
}

void guard_mapping_report(const void* base, int fd, const std::string& text) {
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      s.report_len.store(copy_text(s.report, text), std::memory_order_release);
      s.report_fd.store(fd, std::memory_order_release);
    }
}

void unguard_mapping(const void* base) {
  if (base == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      s.base.store(0, std::memory_order_release);
      s.report_fd.store(-1, std::memory_order_release);
      s.message_len.store(0, std::memory_order_release);
      s.len.store(0, std::memory_order_relaxed);
    }
}

}  // namespace heaplab::trace
