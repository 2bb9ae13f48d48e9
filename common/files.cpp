#include "common/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <stdexcept>
#include <system_error>

namespace heaplab::common {

namespace fs = std::filesystem;
namespace {

// Temporary files of earlier writes of `target` by a heaplab that was
// killed before it could remove them (TARGET.heaplab-PID.part): removed when
// no process PID runs here and the file has not changed for 10 s (a writer
// on another host sharing the directory keeps writing its file).
void remove_stale_parts(const std::string& target) {
  const fs::path t(target);
  const std::string prefix = t.filename().string() + ".heaplab-";
  std::error_code ec;
  const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() + 5 || name.compare(0, prefix.size(), prefix) != 0 || !name.ends_with(".part"))
      continue;
    const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - 5);
    if (digits.empty() || digits.size() > 10 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const long long number = std::stoll(digits);
    if (number > 0x7fffffff) continue;
    const pid_t pid = pid_t(number);
    if (pid <= 0 || pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::time(nullptr) - st.st_mtime < 10) continue;
    ::unlink(it->path().c_str());
  }
}

std::string errstr(int e) { return std::strerror(e); }

// Copies the finished `tmp` into the existing `target` in place (a device,
// a FIFO, a file with other hard links): its inode, links and mode stay.
// A name for an open descriptor (/dev/stdout, /dev/fd/N, /proc/PID/fd/N):
// its link's text is the kernel's name of what is open ("pipe:[N]", a path
// that may be gone), not a path to follow. Written through the name itself.
bool names_a_descriptor(const std::string& p) {
  return p == "/dev/stdout" || p == "/dev/stderr" || p.rfind("/dev/fd/", 0) == 0 || p.rfind("/proc/", 0) == 0;
}

void copy_into(const std::string& tmp, const std::string& target, const std::string& output) {
  const int in = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw std::runtime_error(output + ": cannot write: " + errstr(errno));
  struct stat st {};
  const bool regular = ::stat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  // (What a descriptor's name names is appended to, as its descriptor is
  // by a shell's `>>`: `>` emptied it already.)
  const int out = ::open(target.c_str(), O_WRONLY | O_CLOEXEC |
                                             (names_a_descriptor(target) ? O_APPEND
                                              : regular                  ? O_TRUNC
                                                                         : 0));
  if (out < 0) {
    const int e = errno;
    ::close(in);
    throw std::runtime_error(output + ": cannot write: " + errstr(e));
  }
  char buf[1 << 16];
  int error = 0;
  for (;;) {
    const ssize_t n = ::read(in, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) error = errno;
    if (n <= 0) break;
    for (ssize_t done = 0; done < n && !error;) {
      const ssize_t w = ::write(out, buf + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0)
        error = errno;
      else
        done += w;
    }
    if (error) break;
  }
  ::close(in);
  if (::close(out) != 0 && !error) error = errno;
  if (error) throw std::runtime_error(output + ": cannot write: " + errstr(error));
}

// Where the bytes written to `output` really go: through a symbolic link to
// what it names (the link stays a link; a dangling one's target is made),
// the kernel left to resolve ".." (a link may name a directory); stopped at
// a descriptor's name. A loop (40 links) is an error.
std::string output_target(const std::string& output) {
  std::string target = output;
  std::error_code ec;
  for (int hops = 0; !names_a_descriptor(target) && fs::is_symlink(target, ec); ++hops) {
    if (hops == 40) throw std::runtime_error("cannot write '" + output + "': " + std::strerror(ELOOP));
    const fs::path to = fs::read_symlink(target, ec);
    if (ec) break;
    target = (to.is_absolute() ? to : fs::path(target).parent_path() / to).string();
  }
  return target;
}

// The temporary file for `target` (stat `st`, if `exists`): beside it,
// except for a device, FIFO or descriptor's name (nothing is made in /dev):
// then in the temporary directory.
std::string temporary_for(const std::string& target, bool exists, const struct stat& st) {
  static std::atomic<unsigned> serial{0};  // outputs written at once by threads of this process
  if ((exists && !S_ISREG(st.st_mode)) || names_a_descriptor(target))
    return (fs::temp_directory_path() /
            ("heaplab-" + std::to_string(::getpid()) + "-" + std::to_string(serial++) + ".part"))
        .string();
  return target + ".heaplab-" + std::to_string(::getpid()) + ".part";
}

}  // namespace

void write_then_rename(const std::string& output, const std::function<void(const std::string& tmp)>& write) {
  const std::string target = output_target(output);
  std::error_code ec;
  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) throw std::runtime_error(output + ": cannot create: " + std::strerror(errno));
  // A regular file with no other hard link is replaced whole (rename); any
  // other existing thing (device, FIFO, socket, hard-linked file, what a
  // descriptor's name names) is written in place once the output is
  // complete.
  const bool replace = !names_a_descriptor(target) && (!exists || (S_ISREG(st.st_mode) && st.st_nlink <= 1));
  if (exists && S_ISDIR(st.st_mode)) throw std::runtime_error(output + ": cannot create: Is a directory");
  const std::string tmp = temporary_for(target, exists, st);
  remove_stale_parts(target);
  try {
    write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  if (!replace) {
    try {
      copy_into(tmp, target, output);
    } catch (...) {
      std::remove(tmp.c_str());
      throw;
    }
    std::remove(tmp.c_str());
    return;
  }
  if (exists) ::chmod(tmp.c_str(), st.st_mode & 07777);  // the file keeps its mode
  fs::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error(output + ": cannot create: " + ec.message());
  }
}

void write_text(const std::string& output, const std::string& text) {
  write_then_rename(output, [&](const std::string& tmp) {
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) throw std::runtime_error("cannot write '" + output + "': " + std::strerror(errno));
    int err = std::fwrite(text.data(), 1, text.size(), f) == text.size() ? 0 : errno;
    if (std::fclose(f) != 0 && err == 0) err = errno != 0 ? errno : EIO;
    if (err != 0) throw std::runtime_error("cannot write '" + output + "': " + std::strerror(err));
  });
}

std::string output_problem(const std::string& output) {
  // As write_then_rename writes it: through links; a device, FIFO, file of
  // several links or descriptor's name in place, after a temporary file
  // (in the temporary directory, or beside a file); else a new file beside
  // the target.
  std::string target;
  try {
    target = output_target(output);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (!exists && errno != ENOENT) return "cannot write '" + output + "': " + std::strerror(errno);
  if (exists && S_ISDIR(st.st_mode)) return "cannot write '" + output + "': is a directory";
  if ((exists && (!S_ISREG(st.st_mode) || st.st_nlink > 1)) || names_a_descriptor(target)) {
    if (::access(target.c_str(), W_OK) != 0) return "cannot write '" + output + "': " + std::strerror(errno);
    if (exists && S_ISREG(st.st_mode) && !names_a_descriptor(target)) {
      // (A file of several links: its temporary file goes beside it, probed below.)
    } else {
      std::error_code ec;
      const fs::path tmp = fs::temp_directory_path(ec);
      if (ec) return "cannot write '" + output + "': no temporary directory for it (" + ec.message() + ")";
      if (::access(tmp.c_str(), W_OK | X_OK) != 0)
        return "cannot write '" + output + "': the temporary directory " + tmp.string() + ": " + std::strerror(errno);
      return "";
    }
  }
  const std::string probe = target + ".heaplab-probe-" + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write '" + output + "': " + std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

std::string output_is_input(const std::string& output, const std::vector<std::string>& inputs) {
  struct stat out {};
  if (output.empty() || ::stat(output.c_str(), &out) != 0) return "";
  for (const std::string& in : inputs) {
    struct stat st {};
    if (in.empty() || ::stat(in.c_str(), &st) != 0) continue;
    if (st.st_dev == out.st_dev && st.st_ino == out.st_ino && S_ISREG(st.st_mode))
      return "'" + output + "' is the input '" + in + "': it would be replaced (name another output)";
  }
  return "";
}

std::string read_input_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file (" + what + " is read from a file, not a pipe or device)");
  }
  if (uint64_t(st.st_size) > max_bytes) {
    ::close(fd);
    throw std::runtime_error(path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                             std::to_string(max_bytes >> 20) + " MiB " + what + " may have");
  }
  std::string text(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw std::runtime_error(path + ": cannot read: " + std::strerror(err));
    }
    if (n == 0) break;  // (shorter than it was a moment ago)
    got += size_t(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

std::string self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace heaplab::common
