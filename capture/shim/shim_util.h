// Helpers for the shim that never allocate: messages with write(2), paths
// and numbers formatted by hand.
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

namespace heaplab::shim {

// Appends s to buf[*n..cap); keeps the result NUL-terminated. False if it did not fit.
inline bool append(char* buf, uint64_t cap, uint64_t* n, const char* s) {
  uint64_t len = strlen(s);
  if (*n + len + 1 > cap) return false;
  memcpy(buf + *n, s, len);
  *n += len;
  buf[*n] = 0;
  return true;
}

inline bool append_u64(char* buf, uint64_t cap, uint64_t* n, uint64_t v) {
  char tmp[24];
  int i = 23;
  tmp[i] = 0;
  do {
    tmp[--i] = char('0' + v % 10);
    v /= 10;
  } while (v);
  return append(buf, cap, n, tmp + i);
}

// DIR/PID.GEN.hlraw (or another extension: .ptw for the ptwrite route's marker)
inline bool format_path(char* buf, uint64_t cap, const char* dir, uint32_t pid, uint32_t gen,
                        const char* ext = ".hlraw") {
  uint64_t n = 0;
  buf[0] = 0;
  return append(buf, cap, &n, dir) && append(buf, cap, &n, "/") && append_u64(buf, cap, &n, pid) &&
         append(buf, cap, &n, ".") && append_u64(buf, cap, &n, gen) && append(buf, cap, &n, ext);
}

// Creates DIR/PID.GEN<ext> with the first generation GEN not taken yet
// (one per exec'd image of the process). Returns the descriptor, with the
// path in `path` and the generation in *gen; -1 with errno set, or -2 when
// the path does not fit.
inline int create_image_file(const char* dir, const char* ext, int flags, char* path, uint64_t cap, uint32_t* gen) {
  int fd = -1;
  for (*gen = 0; *gen < 1000; ++*gen) {
    if (!format_path(path, cap, dir, uint32_t(getpid()), *gen, ext)) return -2;
    fd = open(path, flags | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
  }
  return fd;
}

// A process image the capture does not follow, for `heaplab capture` to
// name: one line in DIR/unfollowed, "\nKIND\tPID\tPPID\tEXE\tCOMMAND LINE\t.\n"
// (KIND "exec": this image, exec'd by a process that is not followed into
// it; "fork": this child of a captured image, not followed; the command
// line's NULs as spaces, tabs and newlines as spaces, cut at 240 bytes). One
// write on an O_APPEND file, so lines of processes writing at once never
// mix; past 1 MiB only "\nKIND\tPID\tPPID\t.\n", so a program forking
// millions of times still counts right without filling the disk. The
// leading newline ends a line cut short before it (a full disk), and the
// final "." marks a line written whole: the reader takes no other.
// Async-signal-safe (called in a fork child). False if the line could not
// be written whole: the caller counts the image elsewhere
// (sink_count_unnoted).
inline bool note_unfollowed(const char* dir, const char* kind) {
  char path[4096];
  uint64_t n = 0;
  path[0] = 0;
  if (!append(path, sizeof path, &n, dir) || !append(path, sizeof path, &n, "/unfollowed")) return false;
  const int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  char line[768];
  uint64_t len = 0;
  line[0] = 0;
  append(line, sizeof line, &len, "\n");
  append(line, sizeof line, &len, kind);
  append(line, sizeof line, &len, "\t");
  append_u64(line, sizeof line, &len, uint64_t(getpid()));
  append(line, sizeof line, &len, "\t");
  append_u64(line, sizeof line, &len, uint64_t(getppid()));
  const off_t size = lseek(fd, 0, SEEK_END);
  if (size >= 0 && size < (1 << 20)) {
    char exe[400];
    const ssize_t e = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[e > 0 ? e : 0] = 0;
    for (char* c = exe; *c; ++c)
      if (*c == '\t' || *c == '\n') *c = ' ';
    append(line, sizeof line, &len, "\t");
    append(line, sizeof line, &len, exe);
    char cmd[241];
    ssize_t c = 0;
    const int cfd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (cfd >= 0) {
      c = read(cfd, cmd, sizeof cmd - 1);
      close(cfd);
    }
    if (c < 0) c = 0;
    while (c > 0 && cmd[c - 1] == 0) --c;  // the last argument's NUL
    for (ssize_t i = 0; i < c; ++i)
      if (cmd[i] == 0 || cmd[i] == '\t' || cmd[i] == '\n') cmd[i] = ' ';
    cmd[c] = 0;
    append(line, sizeof line, &len, "\t");
    append(line, sizeof line, &len, cmd);
  }
  append(line, sizeof line, &len, "\t.\n");
  ssize_t w;
  do {
    w = write(fd, line, len);
  } while (w < 0 && errno == EINTR);
  close(fd);
  return w == ssize_t(len);
}

// The name of an errno value, without strerror() (which may allocate
// through gettext and so re-enter the shim).
inline const char* errno_text(int err) {
  switch (err) {
    case ENOSPC:
      return "No space left on device";
    case EFBIG:
      return "File too large";
    case ENOMEM:
      return "Cannot allocate memory";
    case EACCES:
      return "Permission denied";
    case ENOENT:
      return "No such file or directory";
    case EROFS:
      return "Read-only file system";
    case EDQUOT:
      return "Disk quota exceeded";
    case EIO:
      return "Input/output error";
    case EEXIST:
      return "File exists";
    case ENOTDIR:
      return "Not a directory";
    case EMFILE:
      return "Too many open files";
    case EBADF:
      return "Bad file descriptor (the program closed it)";
    default:
      return nullptr;
  }
}

// "heaplab capture: WHAT[ PATH]: error text\n" on stderr, one write.
inline void shim_error_path(const char* what, const char* path, int err) {
  char buf[1024];
  uint64_t n = 0;
  buf[0] = 0;
  append(buf, sizeof buf, &n, "heaplab capture: ");
  append(buf, sizeof buf, &n, what);
  if (path) {
    append(buf, sizeof buf, &n, " ");
    append(buf, sizeof buf, &n, path);
  }
  if (err) {
    append(buf, sizeof buf, &n, ": ");
    if (const char* text = errno_text(err)) {
      append(buf, sizeof buf, &n, text);
    } else {
      append(buf, sizeof buf, &n, "errno ");
      append_u64(buf, sizeof buf, &n, uint64_t(err));
    }
  }
  append(buf, sizeof buf, &n, "\n");
  ssize_t r = write(2, buf, n);
  (void)r;
}

inline void shim_error(const char* what, int err) { shim_error_path(what, nullptr, err); }

}  // namespace heaplab::shim
