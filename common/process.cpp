#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <stdexcept>

extern char** environ;

namespace heaplab::process {
namespace {

std::string errstr(int e) { return std::strerror(e); }

// What the child reports through the error pipe when it cannot start.
struct ChildFailure {
  int stage;  // 0: exec, 1: opening a file, 2: moving descriptors, 3: changing directory
  int err;
  int which;  // stage 1: 0 stdin, 1 stdout, 2 stderr, 3 /dev/null
};

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void write_failure(int fd, int stage, int err, int which) {
  const ChildFailure f{stage, err, which};
  ssize_t w = ::write(fd, &f, sizeof f);
  (void)w;
}

}  // namespace

// ---- Pipe ----------------------------------------------------------------

Pipe::Pipe() {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw SpawnError("pipe: " + errstr(errno), errno);
  read = p[0];
  write = p[1];
}
Pipe::~Pipe() {
  close_read();
  close_write();
}
void Pipe::close_read() { close_fd(read); }
void Pipe::close_write() { close_fd(write); }

// ---- Child ---------------------------------------------------------------

Child& Child::operator=(Child&& o) noexcept {
  if (this != &o) {
    reset();
    pid_ = std::exchange(o.pid_, -1);
    in_ = std::exchange(o.in_, -1);
    out_ = std::exchange(o.out_, -1);
    err_ = std::exchange(o.err_, -1);
    waited_ = std::exchange(o.waited_, false);
    wait_failed_ = std::exchange(o.wait_failed_, false);
    status_ = std::exchange(o.status_, 0);
  }
  return *this;
}

Child::~Child() { reset(); }

void Child::reset() {
  close_fds();
  if (pid_ > 0 && !waited_) {
    ::kill(pid_, SIGKILL);
    wait();
  }
  pid_ = -1;
  waited_ = false;
  wait_failed_ = false;
  status_ = 0;
}

void Child::close_fds() {
  close_fd(in_);
  close_fd(out_);
  close_fd(err_);
}

void Child::close_stdin() { close_fd(in_); }

int Child::wait() {
  if (pid_ <= 0 || waited_) return status_;
  close_fd(in_);  // a child reading its stdin to the end must see the end
  int st = 0;
  if (wait_for(pid_, &st) == pid_) {
    status_ = st;
  } else {
    status_ = 127 << 8;  // reads as "exit 127"
    wait_failed_ = true;
  }
  waited_ = true;
  return status_;
}

void Child::kill(int sig) const {
  if (pid_ > 0 && !waited_) ::kill(pid_, sig);
}

// ---- spawn ---------------------------------------------------------------

std::string SpawnError::why_not_run(const std::string& prog, int err) {
  if (err == ENOENT && prog.find('/') != std::string::npos && ::access(prog.c_str(), F_OK) == 0) {
    char line[256] = {};
    const int fd = ::open(prog.c_str(), O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? ::read(fd, line, sizeof line - 1) : -1;
    if (fd >= 0) ::close(fd);
    if (n > 2 && line[0] == '#' && line[1] == '!') {
      std::string interp(line + 2, size_t(n - 2));
      interp = interp.substr(0, interp.find('\n'));
      const size_t b = interp.find_first_not_of(" \t");
      interp = b == std::string::npos ? "" : interp.substr(b);
      interp = interp.substr(0, interp.find_first_of(" \t"));
      if (!interp.empty() && interp.back() == '\r')  // (a CRLF line: the kernel looks for "sh\r")
        return "its interpreter '" + interp.substr(0, interp.size() - 1) +
               "' (its #! line) ends in a carriage return: the script has CRLF line ends (dos2unix)";
      if (!interp.empty()) return "its interpreter '" + interp + "' (its #! line): " + errstr(err);
    }
  }
  return errstr(err);
}

Child spawn(const Spec& spec) {
  if (spec.argv.empty()) throw SpawnError("spawn: no program given", EINVAL);
  const std::string& prog = spec.argv[0];

  // Everything the child needs, made before fork.
  std::vector<char*> argv;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  static char sh[] = "/bin/sh";
  std::vector<char*> sh_argv = {sh};
  sh_argv.insert(sh_argv.end(), argv.begin(), argv.end());
  // (Whether the program is a text file /bin/sh may run, found before fork.)
  bool script = false;
  if (spec.shell_fallback && !spec.search_path) {
    char head[256];
    const int fd = ::open(prog.c_str(), O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd >= 0 ? ::read(fd, head, sizeof head) : -1;
    if (fd >= 0) ::close(fd);
    script = n > 0 &&
             !(n >= 4 && std::memcmp(head,
                                     "\x7f"
                                     "ELF",
                                     4) == 0) &&
             std::memchr(head, 0, size_t(n)) == nullptr;
  }
  // The parent's environment, then each change in order (a later one wins).
  std::vector<std::string> env_strings;
  for (char** e = environ; e && *e; ++e) env_strings.emplace_back(*e);
  for (const auto& [k, v] : spec.env) {
    const std::string prefix = k + "=";
    std::erase_if(env_strings, [&](const std::string& s) { return s.compare(0, prefix.size(), prefix) == 0; });
    if (v) env_strings.push_back(prefix + *v);
  }
  if (!spec.env_own_pid.empty()) {
    const std::string prefix = spec.env_own_pid + "=";
    std::erase_if(env_strings, [&](const std::string& s) { return s.compare(0, prefix.size(), prefix) == 0; });
    env_strings.push_back(prefix + std::string(24, '\0'));  // digits written in the child
  }
  std::vector<char*> envp;
  envp.reserve(env_strings.size() + 1);
  for (std::string& s : env_strings) envp.push_back(s.data());
  char* own_pid_digits = spec.env_own_pid.empty() ? nullptr : envp.back() + spec.env_own_pid.size() + 1;
  envp.push_back(nullptr);

  Pipe errpipe;
  std::optional<Pipe> in_pipe, out_pipe, err_pipe;
  if (spec.in == Stdio::pipe) in_pipe.emplace();
  if (spec.out == Stdio::pipe) out_pipe.emplace();
  if (spec.err == Stdio::pipe) err_pipe.emplace();
  const char* files[3] = {spec.in_file.c_str(), spec.out_file.c_str(), spec.err_file.c_str()};
  const Stdio modes[3] = {spec.in, spec.out, spec.err};
  const int pipe_child_end[3] = {in_pipe ? in_pipe->read : -1, out_pipe ? out_pipe->write : -1,
                                 err_pipe ? err_pipe->write : -1};
  std::vector<std::pair<int, int>> fds = spec.fds;  // copied: no allocation in the child
  const int max_moves = 3 + int(fds.size());
  std::vector<int> src(size_t(max_moves), -1), dst(size_t(max_moves), -1);
  // Where sources are parked in the child before they move into place:
  // above every target, so that no parked copy sits on a target.
  int park = 3;
  for (const auto& [child_fd, parent_fd] : fds) park = std::max(park, child_fd + 1);
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int sig : spec.unblock_signals) sigaddset(&unblock, sig);

  const char* cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();

  const pid_t pid = ::fork();
  if (pid < 0) throw SpawnError("fork: " + errstr(errno), errno);
  if (pid == 0) {
    // The child: async-signal-safe calls only from here on.
    // The error pipe first, out of the way of every target (with the
    // parent's fds 0-2 closed it may sit on one of them).
    const int err_fd = ::fcntl(errpipe.write, F_DUPFD_CLOEXEC, park);
    if (err_fd < 0) ::_exit(127);
    park = err_fd + 1;
    if (spec.die_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    for (int sig : spec.default_signals) ::signal(sig, SIG_DFL);
    for (int sig : spec.ignore_signals) ::signal(sig, SIG_IGN);
    if (!spec.unblock_signals.empty()) ::sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
    if (own_pid_digits) {
      char tmp[24];
      int k = 0;
      for (unsigned long v = static_cast<unsigned long>(::getpid()); v || k == 0; v /= 10)
        tmp[k++] = char('0' + v % 10);
      for (int i = 0; i < k; ++i) own_pid_digits[i] = tmp[k - 1 - i];
      own_pid_digits[k] = '\0';
    }
    if (cwd && ::chdir(cwd) != 0) write_failure(err_fd, 3, errno, 0), ::_exit(127);
    int n = 0;
    for (int i = 0; i < 3; ++i) {
      int fd = -1;
      switch (modes[i]) {
        case Stdio::inherit:
          continue;
        case Stdio::null:
          fd = ::open("/dev/null", (i == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
          if (fd < 0) write_failure(err_fd, 1, errno, 3), ::_exit(127);
          break;
        case Stdio::pipe:
          fd = pipe_child_end[i];
          break;
        case Stdio::file:
          fd = i == 0 ? ::open(files[i], O_RDONLY | O_CLOEXEC)
                      : ::open(files[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
          if (fd < 0) write_failure(err_fd, 1, errno, i), ::_exit(127);
          break;
        case Stdio::to_out:
          fd = -2;  // after stdout is in place
          break;
      }
      src[size_t(n)] = fd;
      dst[size_t(n)] = i;
      ++n;
    }
    for (const auto& [child_fd, parent_fd] : fds) {
      src[size_t(n)] = parent_fd;
      dst[size_t(n)] = child_fd;
      ++n;
    }
    // Out of the way first (a source may sit on another's target), then
    // into place; dup2 clears close-on-exec on the target.
    for (int i = 0; i < n; ++i) {
      if (src[size_t(i)] < 0) continue;
      const int high = ::fcntl(src[size_t(i)], F_DUPFD_CLOEXEC, park);
      if (high < 0) write_failure(err_fd, 2, errno, dst[size_t(i)]), ::_exit(127);
      src[size_t(i)] = high;
    }
    for (int i = 0; i < n; ++i) {
      const int s = src[size_t(i)] == -2 ? 1 : src[size_t(i)];
      if (s >= 0 && ::dup2(s, dst[size_t(i)]) < 0) write_failure(err_fd, 2, errno, dst[size_t(i)]), ::_exit(127);
    }
    if (spec.search_path)
      ::execvpe(argv[0], argv.data(), envp.data());
    else
      ::execve(argv[0], argv.data(), envp.data());
    const int exec_err = errno;
    if (exec_err == ENOEXEC && script) ::execve(sh, sh_argv.data(), envp.data());
    write_failure(err_fd, 0, exec_err, 0);  // (the program's own error, not /bin/sh's)
    ::_exit(127);
  }

  Child c;
  c.pid_ = pid;
  errpipe.close_write();
  if (in_pipe) {
    in_pipe->close_read();
    c.in_ = std::exchange(in_pipe->write, -1);
  }
  if (out_pipe) {
    out_pipe->close_write();
    c.out_ = std::exchange(out_pipe->read, -1);
  }
  if (err_pipe) {
    err_pipe->close_write();
    c.err_ = std::exchange(err_pipe->read, -1);
  }
  ChildFailure f{};
  ssize_t got;
  do got = ::read(errpipe.read, &f, sizeof f);
  while (got < 0 && errno == EINTR);
  if (got == sizeof f) {
    c.wait();
    std::string why = errstr(f.err);
    if (f.stage == 1) {
      const char* names[4] = {files[0], files[1], files[2], "/dev/null"};
      why = std::string("cannot open '") + names[f.which] + "': " + why;
    } else if (f.stage == 3) {
      why = "cannot change to directory '" + spec.cwd + "': " + why;
    } else if (f.stage == 2) {
      why = "cannot set up descriptor " + std::to_string(f.which) + ": " + why;
    }
    if (f.stage == 0) why = SpawnError::why_not_run(prog, f.err);
    throw SpawnError("cannot run '" + prog + "': " + why, f.err, f.stage == 0);
  }
  return c;
}

void read_all(int fd, std::string& out) {
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
}

bool read_all(int fd, std::string& out, double seconds) {
  seconds = std::min(seconds, 1e9);  // (beyond, the clock's arithmetic overflows; 30 years is "none")
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  char buf[65536];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    if (rc == 0) continue;
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("read: ") + std::strerror(errno));
    if (n == 0) return true;
    out.append(buf, size_t(n));
  }
}

Output run(const Spec& spec) {
  Child c = spawn(spec);
  c.close_stdin();
  Output o;
  pollfd p[2] = {{c.stdout_fd(), POLLIN, 0}, {c.stderr_fd(), POLLIN, 0}};
  std::string* sink[2] = {&o.out, &o.err};
  char buf[65536];
  while (p[0].fd >= 0 || p[1].fd >= 0) {
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i].fd < 0 || !p[i].revents) continue;
      const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        p[i].fd = -1;  // poll ignores negative descriptors; Child closes it
        continue;
      }
      sink[i]->append(buf, size_t(n));
    }
  }
  o.status = c.wait();
  return o;
}

pid_t wait_for(pid_t pid, int* status, int options) {
  pid_t r;
  do r = ::waitpid(pid, status, options);
  while (r < 0 && errno == EINTR);
  return r;
}

int exit_code(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

bool succeeded(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status))
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + signal_name(WTERMSIG(status)) + ")";
  return "exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

}  // namespace heaplab::process
