// Child processes: the one place heaplab starts and waits for programs.
//
// spawn() prepares everything it can before fork() (argv, the environment,
// which descriptors go where), so the child only opens, dups and execs
// (async-signal-safe: callers may have threads). A failed exec is reported
// to the parent through a close-on-exec pipe, so "cannot run 'X': No such
// file or directory" is a SpawnError in the parent, never an exit code 127
// the caller has to guess about. Waits retry on EINTR. A Child that goes out
// of scope unwaited is killed (SIGKILL) and reaped: no zombies, no orphans
// left running after an exception.
#pragma once

#include <sys/types.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace heaplab::process {

// What a standard stream of the child is connected to.
enum class Stdio {
  inherit,  // the parent's
  null,     // /dev/null
  pipe,     // a pipe whose other end the parent reads (stdout, stderr) or writes (stdin)
  file,     // a file (stdin: read; stdout/stderr: created or truncated, mode 0644)
  to_out,   // stderr only: wherever stdout goes
};

struct Spec {
  std::vector<std::string> argv;  // argv[0]: the program (a path, or a name with search_path)
  bool search_path = false;       // look argv[0] up in PATH (execvp's rules)
  // A text file the kernel cannot execute (no #! line: ENOEXEC, not ELF
  // and no NUL in its first 256 bytes, as bash checks) is run by /bin/sh, as
  // a shell runs it. (Only for a program given by its path.)
  bool shell_fallback = false;
  // On top of the parent's environment, in order (a later entry for the same
  // name wins): {name, value} sets, {name, nullopt} unsets.
  std::vector<std::pair<std::string, std::optional<std::string>>> env;
  Stdio in = Stdio::inherit, out = Stdio::inherit, err = Stdio::inherit;
  std::string in_file, out_file, err_file;  // for Stdio::file
  // Descriptors handed to the child: {child_fd, parent_fd} (child_fd >= 3).
  // Every other descriptor heaplab opened close-on-exec stays closed.
  std::vector<std::pair<int, int>> fds;
  // The name of a variable the child gets set to its own pid (for programs
  // that must know which process was started first; "" : none).
  std::string env_own_pid;
  std::string cwd;                   // the child's working directory ("" : the parent's)
  bool die_with_parent = false;      // PR_SET_PDEATHSIG SIGKILL
  std::vector<int> default_signals;  // reset to SIG_DFL in the child (e.g. SIGXFSZ, SIGPIPE)
  std::vector<int> ignore_signals;   // SIG_IGN in the child (kept ignored across exec)
  // Unblocked in the child before exec: signals the parent blocked around
  // spawn() so that none arrives before it knows the child's pid.
  std::vector<int> unblock_signals;
};

// fork, pipe or exec failed. `err` is the errno; `what()` is one line;
// exec_failed(): the program itself could not be run (not found, not
// executable), as opposed to heaplab failing to start a process at all.
class SpawnError : public std::runtime_error {
 public:
  // Why `prog` could not be run, for exec's `err`: its text, or for a file
  // that is there with a #! line naming an interpreter that is not, that
  // ("its interpreter '/usr/bin/pyhton' (its #! line): No such file or
  // directory").
  static std::string why_not_run(const std::string& prog, int err);
  SpawnError(const std::string& msg, int err, bool exec_failed = false)
      : std::runtime_error(msg), err_(err), exec_failed_(exec_failed) {}
  int err() const { return err_; }
  bool exec_failed() const { return exec_failed_; }

 private:
  int err_;
  bool exec_failed_;
};

class Child {
 public:
  Child() = default;
  Child(Child&& o) noexcept { *this = std::move(o); }
  Child& operator=(Child&& o) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();  // unwaited: SIGKILL, then reaped

  pid_t pid() const { return pid_; }
  // The parent's ends of Stdio::pipe streams (-1 if none). The caller may
  // close them early (close_stdin() to signal end of input).
  int stdin_fd() const { return in_; }
  int stdout_fd() const { return out_; }
  int stderr_fd() const { return err_; }
  void close_stdin();
  // Hands the stdin pipe's end over to the caller (who closes it), e.g. to
  // a thread that feeds the child.
  int release_stdin() { return std::exchange(in_, -1); }

  // Waits for the child to end (retrying on EINTR) and returns its raw
  // wait status; read the pipes before. Idempotent. If the child cannot be
  // waited for (someone else reaped it; SIGCHLD ignored), the status reads
  // as exit 127 and wait_failed() says so: never a made-up success.
  int wait();
  bool wait_failed() const { return wait_failed_; }
  bool waited() const { return pid_ <= 0 || waited_; }
  int status() const { return status_; }
  // Sends `sig` if the child has not been waited for.
  void kill(int sig) const;

 private:
  friend Child spawn(const Spec& spec);
  void close_fds();
  void reset();
  pid_t pid_ = -1;
  int in_ = -1, out_ = -1, err_ = -1;
  bool waited_ = false;
  bool wait_failed_ = false;
  int status_ = 0;
};

// Starts the program. Throws SpawnError ("cannot run 'PROG': REASON") when
// it cannot be started; returns once the program has been exec'd.
Child spawn(const Spec& spec);

// What a program printed and how it ended.
struct Output {
  int status = 0;
  std::string out, err;  // its stdout / stderr, where they were Stdio::pipe
};

// spawn(), then reads the piped streams (both at once, so neither can
// fill up and stall the child) until they close, then waits.
Output run(const Spec& spec);

// Reads everything from `fd` until EOF (retrying on EINTR) and appends to `out`.
void read_all(int fd, std::string& out);
// The same for at most `seconds` (a child that may hang): false if the time
// ran out first, with what came until then in `out`. A failed poll or read
// throws std::runtime_error ("poll: REASON", "read: REASON").
bool read_all(int fd, std::string& out, double seconds);

// waitpid() that retries on EINTR. Returns the pid, or -1 with errno set.
pid_t wait_for(pid_t pid, int* status, int options = 0);

// A wait status as an exit code: the status, or 128+N for signal N.
int exit_code(int status);
bool succeeded(int status);  // exited with 0
// "exit 3", "signal 11 (SIGSEGV)".
std::string describe_status(int status);
// "SIGSEGV" (or "signal N" for one without a name).
std::string signal_name(int sig);

// A pipe, both ends close-on-exec; the ends close when it goes away.
struct Pipe {
  int read = -1, write = -1;
  Pipe();  // throws SpawnError
  ~Pipe();
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_read();
  void close_write();
};

}  // namespace heaplab::process
