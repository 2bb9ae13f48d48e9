// Preloaded after the shim (LD_PRELOAD=shim.so:signal_during_start.so) by
// capture_test's SignalDuringShimStartUp. It defines getenv, which the shim
// calls while it starts up (looking for HEAPLAB_CAPTURE_DIR): on that first
// call it installs a SIGUSR1 handler and raises SIGUSR1 on the starting
// thread. The handler makes three allocations of sizes nothing else uses
// (7001, 7002, 7003 bytes) and frees them: the program's calls, which the
// trace must hold, however early they come.
// With SIGNAL_DURING_START_FAULT=1 it also faults there (a read of address
// 1) under a SIGSEGV handler that jumps back: the program must survive it,
// as it would without heaplab (a fault's signal is never held).
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

extern char** environ;

static volatile sig_atomic_t g_raised;
static sigjmp_buf g_fault;

static void on_segv(int sig) {
  (void)sig;
  siglongjmp(g_fault, 1);
}

static void on_usr1(int sig) {
  (void)sig;
  void* p[3];
  for (int i = 0; i < 3; ++i) p[i] = malloc(7001 + (size_t)i);
  for (int i = 0; i < 3; ++i) free(p[i]);
}

// libc's getenv, written out: calling the next definition through dlsym
// would allocate inside the shim's start-up.
static char* find(const char* name) {
  const size_t n = strlen(name);
  for (char** e = environ; e && *e; ++e)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

char* getenv(const char* name) {
  if (!g_raised && strcmp(name, "HEAPLAB_CAPTURE_DIR") == 0) {
    g_raised = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    raise(SIGUSR1);
    const char* fault = find("SIGNAL_DURING_START_FAULT");
    if (fault && strcmp(fault, "1") == 0) {
      sa.sa_handler = on_segv;
      sigaction(SIGSEGV, &sa, NULL);
      if (sigsetjmp(g_fault, 1) == 0) {
        volatile const char* volatile bad = (const char*)1;
        (void)*bad;
      }
      sa.sa_handler = SIG_DFL;
      sigaction(SIGSEGV, &sa, NULL);
    }
  }
  return find(name);
}
