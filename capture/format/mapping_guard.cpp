#include "capture/format/mapping_guard.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace heaplab::trace {

namespace {

constexpr size_t kSlots = 64;
constexpr size_t kMessage = 480;

struct Slot {
  std::atomic<uintptr_t> base{0};  // 0: free
  std::atomic<size_t> len{0};
  char message[kMessage];
  std::atomic<size_t> message_len{0};
};

Slot g_slots[kSlots];
std::mutex g_mu;  // registrations (the handler only reads)
struct sigaction g_previous;
bool g_installed = false;

void on_sigbus(int sig, siginfo_t* info, void* ctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t base = s.base.load(std::memory_order_acquire);
    if (base == 0 || addr - base >= s.len.load(std::memory_order_relaxed)) continue;
    const size_t n = s.message_len.load(std::memory_order_acquire);
    if (n != 0) {
      const ssize_t w = ::write(STDERR_FILENO, s.message, n);
      (void)w;
    }
    ::_exit(2);
  }
  // Not a guarded mapping's: as before this handler (the fault repeats once
  // the instruction runs again, under the previous disposition).
  if ((g_previous.sa_flags & SA_SIGINFO) && g_previous.sa_sigaction) {
    g_previous.sa_sigaction(sig, info, ctx);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler) {
    g_previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
}

}  // namespace

void guard_mapping(const void* base, size_t len, const std::string& path) {
  if (base == nullptr || len == 0) return;
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_installed) {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_previous) != 0) return;
    g_installed = true;
  }
  for (Slot& s : g_slots) {
    if (s.base.load(std::memory_order_relaxed) != 0) continue;
    const std::string m = "heaplab: error: " + path +
                          ": the file shrank while it was read (rewritten or truncated by another program?)\n";
    const size_t n = std::min(m.size(), kMessage);
    std::memcpy(s.message, m.data(), n);
    if (n == kMessage) s.message[n - 1] = '\n';
    s.message_len.store(n, std::memory_order_release);
    s.len.store(len, std::memory_order_relaxed);
    s.base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return;
  }
}

void unguard_mapping(const void* base) {
  if (base == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (Slot& s : g_slots)
    if (s.base.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(base)) {
      s.base.store(0, std::memory_order_release);
      s.message_len.store(0, std::memory_order_release);
      s.len.store(0, std::memory_order_relaxed);
    }
}

}  // namespace heaplab::trace
