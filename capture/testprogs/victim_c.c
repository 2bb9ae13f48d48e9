/* A C program with exactly known heap calls, for the capture tests.
 *   victim_c single        one thread, a fixed sequence (see below)
 *   victim_c fork          allocates, forks; the child allocates and exits
 *   victim_c forkfirst N   forks before any heap call of its own; the child
 *                          makes N malloc(32)/free pairs and exits
 *   victim_c _fork N       as forkfirst, with _Fork (no atfork handlers run), after
 *                          N malloc(24)/free pairs of its own: the child makes N
 *                          malloc(32)/free pairs
 *   victim_c sysfork N     as _fork, with syscall(SYS_fork) (no libc fork at all)
 *   victim_c clone3 N      as _fork, with syscall(SYS_clone3) of a process on this stack
 *   victim_c clone N       as _fork, with clone(3) without CLONE_VM (the child runs a
 *                          function on a stack of its own)
 *   victim_c clonetiny     clone(3) without CLONE_VM on a 4 KiB stack above a guard page
 *                          (as runc does): the child makes no heap call and exits 7
 *   victim_c sysclonestack N  as _fork, with syscall(SYS_clone) of a process on a stack of
 *                          its own: the child resumes inside syscall(2) on it and returns to
 *                          the address placed at its top
 *   victim_c clonetls      as sysclonestack, with CLONE_SETTLS (thread-local storage of its own,
 *                          an empty page): the child makes no heap call and exits 7
 *   victim_c rawthread     a thread made by syscall(SYS_clone, CLONE_VM | ..., stack): its
 *                          child resumes inside syscall(2) on the new stack and returns to
 *                          the address placed at its top (exits 0 once it ran)
 *   victim_c exec          allocates, then execs "victim_c single" in the same process
 *   victim_c spawn         allocates, then fork+exec "victim_c single" and waits
 *   victim_c crash MODE N  N mallocs, then dies by MODE: kill, segv or abort
 *   victim_c closefds FILE like a daemon: closes every descriptor above 2, opens FILE
 *                          (which gets a low number) and writes "mine" to it, then
 *                          allocates on: the capture must never write into FILE
 *   victim_c signal N      N malloc/free pairs while a timer signal handler
 *                          also mallocs and frees; prints both counts
 *   victim_c mainexit N    forks; the child's main thread starts a thread that
 *                          makes N malloc/free pairs of 48 bytes, then calls
 *                          pthread_exit (the process runs on without it)
 *   victim_c robust N      N threads, one after another: each locks a robust mutex of its
 *                          own, makes 100000 malloc/free pairs of 48 bytes and ends holding
 *                          it; a key destructor of the program's locks another robust mutex
 *                          around 2100 malloc/free pairs of 40 bytes (more than a capture
 *                          block holds) as each thread ends. Then main locks each held mutex
 *                          (5 s at most): exits 0 if every lock says EOWNERDEAD
 * Every scenario brackets its calls with malloc(777001)/free and
 * malloc(777002)/free markers, so tests ignore what libc does around them. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void marker(size_t n) { free(malloc(n)); }
#define BEGIN() marker(777001)
#define END() marker(777002)

static void* volatile sink;

static int single(void) {
  BEGIN();
  void* a = malloc(10);
  void* b = calloc(3, 8);
  a = realloc(a, 100);
  void* c = realloc(NULL, 5);
  free(NULL);
  free(b);
  c = realloc(c, 0); /* glibc frees and returns NULL */
  volatile size_t huge = SIZE_MAX;
  void* d = malloc(huge); /* fails */
  sink = d;
  free(a);
  END();
  return 0;
}

/* n malloc(size)/free pairs. */
static void malloc_free(long n, size_t size) {
  for (long i = 0; i < n; ++i) {
    void* p = malloc(size);
    sink = p;
    free(p);
  }
}

static void* pairs(void* arg) {
  BEGIN();
  malloc_free((long)arg, 48);
  END();
  return NULL;
}

static int main_exits(long n) {
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    pthread_t t;
    if (pthread_create(&t, NULL, pairs, (void*)n) != 0) _exit(1);
    pthread_exit(NULL);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

static int do_fork(void) {
  BEGIN();
  void* p = malloc(111);
  pid_t pid = fork();
  if (pid == 0) {
    void* q = malloc(222);
    free(p); /* allocated before the fork: unknown to the child's trace */
    free(q);
    END();
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  void* r = malloc(333);
  free(r);
  free(p);
  END();
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

/* After a fork that returned pid: the child makes n malloc(32)/free pairs
 * and exits, the parent waits for it and returns its status. */
static int child_pairs(pid_t pid, long n) {
  if (pid == 0) {
    malloc_free(n, 32);
    _exit(0);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int fork_first(long n) { return child_pairs(fork(), n); }

pid_t _Fork(void);  // (glibc 2.34)

static int underscore_fork(long n) {
  malloc_free(n, 24);
  return child_pairs(_Fork(), n);
}

static int sys_fork(long n) {
  malloc_free(n, 24);
  return child_pairs((pid_t)syscall(SYS_fork), n);
}

static int sys_clone3(long n) {
  uint64_t args[11] = {0}; /* struct clone_args: flags, pidfd, child_tid, parent_tid, exit_signal, stack, ... */
  args[4] = SIGCHLD;
  malloc_free(n, 24);
  return child_pairs((pid_t)syscall(SYS_clone3, args, (size_t)88), n);
}

static long clone_n;
static int clone_child(void* arg) {
  (void)arg;
  malloc_free(clone_n, 32);
  return 0;
}

static int clone_fork(long n) {
  static char stack[256 * 1024] __attribute__((aligned(16)));
  malloc_free(n, 24);
  clone_n = n;
  const pid_t pid = clone(clone_child, stack + sizeof stack, SIGCHLD, NULL);
  if (pid < 0) return 1;
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static int tiny_child(void* arg) {
  (void)arg;
  return 7;
}

static int clone_tiny(void) {
  char* pages = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pages == MAP_FAILED || mprotect(pages, 4096, PROT_NONE) != 0) return 1;
  BEGIN();
  const pid_t pid = clone(tiny_child, pages + 8192, SIGCHLD, NULL);
  if (pid < 0) return 1;
  int st;
  waitpid(pid, &st, 0);
  END();
  return WIFEXITED(st) && WEXITSTATUS(st) == 7 ? 0 : 1;
}

static volatile int raw_thread_ran;
static void raw_thread_entry(void) {
  raw_thread_ran = 1;
  syscall(SYS_exit, 0);
}

static long raw_proc_n;
static void raw_proc_entry(void) {
  malloc_free(raw_proc_n, 32);
  _exit(0);
}

static int sys_clone_stack(long n) {
  static char stack[256 * 1024] __attribute__((aligned(16)));
  void** top = (void**)(stack + sizeof stack - 64);
  void (*entry)(void) = raw_proc_entry;
  memcpy(top, &entry, sizeof entry); /* what syscall(2)'s `ret` pops in the child */
  malloc_free(n, 24);
  raw_proc_n = n;
  const long pid = syscall(SYS_clone, (long)SIGCHLD, top, NULL, NULL, 0);
  if (pid < 0) return 1;
  int st;
  waitpid((pid_t)pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

static void raw_tls_entry(void) { syscall(SYS_exit, 7); }

static int clone_tls(void) {
  static char stack[64 * 1024] __attribute__((aligned(16)));
  char* tls = mmap(NULL, 128 * 1024, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (tls == MAP_FAILED) return 1;
  char* tcb = tls + 64 * 1024; /* %fs:0 points at itself, the TLS below it */
  memcpy(tcb, &tcb, sizeof tcb);
  void** top = (void**)(stack + sizeof stack - 64);
  void (*entry)(void) = raw_tls_entry;
  memcpy(top, &entry, sizeof entry);
  const long pid = syscall(SYS_clone, (long)(SIGCHLD | CLONE_SETTLS), top, NULL, NULL, tcb);
  if (pid < 0) return 1;
  int st;
  waitpid((pid_t)pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int raw_thread(void) {
  char* stack = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) return 1;
  void** top = (void**)(stack + 65536 - 64);
  void (*entry)(void) = raw_thread_entry;
  memcpy(top, &entry, sizeof entry); /* what syscall(2)'s `ret` pops in the child */
  const long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
  if (syscall(SYS_clone, flags, top, NULL, NULL, 0) < 0) return 1;
  for (int i = 0; i < 5000 && !raw_thread_ran; ++i) usleep(1000);
  return raw_thread_ran ? 0 : 1;
}

static int do_exec(const char* self, int spawn) {
  BEGIN();
  void* p = malloc(444);
  sink = p;
  if (spawn) {
    pid_t pid = fork();
    if (pid == 0) {
      execl(self, self, "single", (char*)NULL);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    free(p);
    END();
    return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
  }
  execl(self, self, "single", (char*)NULL);
  return 127;
}

static int crash(const char* mode, long n) {
  BEGIN();
  for (long i = 0; i < n; ++i) sink = malloc((size_t)(i % 100) + 1);
  if (strcmp(mode, "kill") == 0) kill(getpid(), SIGKILL);
  if (strcmp(mode, "segv") == 0) *(volatile int*)0 = 1;
  if (strcmp(mode, "abort") == 0) abort();
  return 3;
}

static int closefds(const char* file) {
  BEGIN();
  for (int i = 0; i < 10; ++i) sink = malloc(16);
  for (int fd = 3; fd < 4096; ++fd) close(fd);
  FILE* f = fopen(file, "w");
  if (!f) return 4;
  for (int i = 0; i < 20000; ++i) free(malloc(24)); /* fills blocks: appends are attempted */
  fputs("mine", f);
  fclose(f);
  END();
  return 0;
}

static volatile long handler_calls;
static void on_alarm(int sig) {
  (void)sig;
  free(malloc(48)); /* not async-signal-safe, but programs do it */
  ++handler_calls;
}

static int signals(long n) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval it = {{0, 50}, {0, 50}};
  BEGIN();
  setitimer(ITIMER_REAL, &it, NULL);
  long i = 0;
  for (; i < n || handler_calls < 100; ++i) free(malloc(32));
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  END();
  printf("%ld %ld\n", i, handler_calls);
  return 0;
}

static pthread_mutex_t robust_held[64];
static pthread_mutex_t robust_after;
static pthread_key_t robust_key;

static void robust_destructor(void* p) {
  (void)p;
  pthread_mutex_lock(&robust_after);
  for (int k = 0; k < 2100; ++k) free(malloc(40));
  pthread_mutex_unlock(&robust_after);
}

static void* robust_thread(void* arg) {
  pthread_setspecific(robust_key, arg);
  pthread_mutex_lock(&robust_held[(long)arg - 1]);
  for (int k = 0; k < 100000; ++k) free(malloc(48));
  return NULL; /* ends holding its mutex */
}

static int robust(long n) {
  if (n < 1 || n > 64) return 2;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  for (long i = 0; i < n; ++i) pthread_mutex_init(&robust_held[i], &a);
  pthread_mutex_init(&robust_after, &a);
  pthread_key_create(&robust_key, robust_destructor);
  BEGIN();
  for (long i = 0; i < n; ++i) {
    pthread_t t;
    if (pthread_create(&t, NULL, robust_thread, (void*)(i + 1)) != 0) return 3;
    pthread_join(t, NULL);
  }
  long dead = 0;
  for (long i = 0; i < n; ++i) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 5;
    const int rc = pthread_mutex_timedlock(&robust_held[i], &until);
    if (rc == EOWNERDEAD) {
      ++dead;
      pthread_mutex_consistent(&robust_held[i]);
    }
    if (rc == 0 || rc == EOWNERDEAD) pthread_mutex_unlock(&robust_held[i]);
  }
  END();
  printf("%ld\n", dead);
  return dead == n ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "single")) return single();
  if (!strcmp(argv[1], "fork")) return do_fork();
  if (!strcmp(argv[1], "forkfirst") && argc == 3) return fork_first(atol(argv[2]));
  if (!strcmp(argv[1], "_fork") && argc == 3) return underscore_fork(atol(argv[2]));
  if (!strcmp(argv[1], "sysfork") && argc == 3) return sys_fork(atol(argv[2]));
  if (!strcmp(argv[1], "clone") && argc == 3) return clone_fork(atol(argv[2]));
  if (!strcmp(argv[1], "clone3") && argc == 3) return sys_clone3(atol(argv[2]));
  if (!strcmp(argv[1], "clonetiny")) return clone_tiny();
  if (!strcmp(argv[1], "rawthread")) return raw_thread();
  if (!strcmp(argv[1], "clonetls")) return clone_tls();
  if (!strcmp(argv[1], "sysclonestack") && argc == 3) return sys_clone_stack(atol(argv[2]));
  if (!strcmp(argv[1], "exec")) return do_exec(argv[0], 0);
  if (!strcmp(argv[1], "spawn")) return do_exec(argv[0], 1);
  if (!strcmp(argv[1], "crash") && argc == 4) return crash(argv[2], atol(argv[3]));
  if (!strcmp(argv[1], "signal") && argc == 3) return signals(atol(argv[2]));
  if (!strcmp(argv[1], "closefds") && argc == 3) return closefds(argv[2]);
  if (!strcmp(argv[1], "mainexit") && argc == 3) return main_exits(atol(argv[2]));
  if (!strcmp(argv[1], "robust") && argc == 3) return robust(atol(argv[2]));
  return 2;
}
