// Tests of the one output helper: complete outputs only, and a user's
// special files, links and modes left as they were.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <stdexcept>
#include <string>
#include <thread>

namespace heaplab::common {
namespace {

namespace fs = std::filesystem;

struct Dir {
  fs::path path;
  Dir() {
    char tmpl[] = "/tmp/heaplab_files_test_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Dir() { fs::remove_all(path); }
  std::string file(const char* name) const { return (path / name).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(Files, NewFileAndAFailedWriteLeavesNothing) {
  Dir d;
  write_text(d.file("out"), "hello\n");
  EXPECT_EQ(slurp(d.file("out")), "hello\n");
  EXPECT_THROW(write_then_rename(d.file("out"),
                                 [](const std::string& tmp) {
                                   std::ofstream(tmp) << "half";
                                   throw std::runtime_error("failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(slurp(d.file("out")), "hello\n");  // untouched
  int entries = 0;
  for (const auto& e : fs::directory_iterator(d.path)) entries += e.path().filename() != "out";
  EXPECT_EQ(entries, 0);  // no temporary file left
}

// A heaplab killed while writing left TARGET.heaplab-PID.part: the next
// write of the target removes it once no process PID runs and it has not
// changed for 10 s; a fresh one (a writer on another host) and another
// target's stay.
TEST(Files, TemporaryFilesOfKilledWritersAreRemoved) {
  Dir d;
  const std::string stale = d.file("out.heaplab-2147483646.part");  // no such pid (above pid_max)
  const std::string fresh = d.file("out.heaplab-2147483645.part");
  const std::string other = d.file("other.heaplab-2147483646.part");  // another target's
  for (const std::string& f : {stale, fresh, other}) std::ofstream(f) << "half";
  const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(5);
  fs::last_write_time(stale, old);
  fs::last_write_time(other, old);
  write_text(d.file("out"), "whole\n");
  EXPECT_EQ(slurp(d.file("out")), "whole\n");
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_TRUE(fs::exists(fresh));
  EXPECT_TRUE(fs::exists(other));
}

TEST(Files, AnExistingFileKeepsItsMode) {
  Dir d;
  write_text(d.file("out"), "old\n");
  ::chmod(d.file("out").c_str(), 0600);
  write_text(d.file("out"), "new\n");
  struct stat st {};
  ASSERT_EQ(::stat(d.file("out").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(slurp(d.file("out")), "new\n");
}

TEST(Files, ASymlinkStaysALinkAndItsTargetIsWritten) {
  Dir d;
  write_text(d.file("target"), "old\n");
  fs::create_symlink(d.file("target"), d.file("link"));
  write_text(d.file("link"), "new\n");
  EXPECT_TRUE(fs::is_symlink(d.file("link")));
  EXPECT_EQ(slurp(d.file("target")), "new\n");
}

TEST(Files, ADanglingSymlinkGetsItsTargetMade) {
  Dir d;
  fs::create_symlink("sub/../target", d.file("link"));  // relative, through a directory made below
  fs::create_directory(d.path / "sub");
  write_text(d.file("link"), "made\n");
  EXPECT_TRUE(fs::is_symlink(d.file("link")));
  EXPECT_EQ(slurp(d.file("target")), "made\n");
}

TEST(Files, AHardLinkSeesTheNewContent) {
  Dir d;
  write_text(d.file("a"), "old\n");
  fs::create_hard_link(d.file("a"), d.file("b"));
  write_text(d.file("a"), "new\n");
  EXPECT_EQ(slurp(d.file("b")), "new\n");
  EXPECT_EQ(fs::hard_link_count(d.file("a")), 2u);
}

TEST(Files, AFifoIsWrittenNotReplaced) {
  Dir d;
  ASSERT_EQ(::mkfifo(d.file("fifo").c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(d.file("fifo")); });
  write_text(d.file("fifo"), "through the fifo\n");
  reader.join();
  EXPECT_EQ(got, "through the fifo\n");
  EXPECT_TRUE(fs::is_fifo(d.file("fifo")));
}

// The real /dev/null must never become a regular file: here a device node
// of the same kind (1:3), made by root in a temporary directory.
TEST(Files, ADeviceStaysADevice) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to make a device node";
  Dir d;
  ASSERT_EQ(::mknod(d.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  write_text(d.file("null"), "discarded\n");
  struct stat st {};
  ASSERT_EQ(::stat(d.file("null").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(st.st_rdev, makedev(1, 3));
  write_text("/dev/null", "discarded\n");  // and the real one, as heaplab -o /dev/null would
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(Files, ADirectoryIsRefused) {
  Dir d;
  try {
    write_text(d.path.string(), "x");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), d.path.string() + ": cannot create: Is a directory");
  }
}

// Whether an output can be written is asked as write_text writes it:
// through a link to its target, in place for a device, beside the target
// otherwise; with nothing left behind.
TEST(Files, OutputProblemAsTheWriteWouldMeetIt) {
  Dir d;
  EXPECT_EQ(output_problem(d.file("new")), "");
  EXPECT_EQ(output_problem("/dev/null"), "");  // (written in place: nothing made in /dev)
  EXPECT_EQ(output_problem(d.path.string()), "cannot write '" + d.path.string() + "': is a directory");
  EXPECT_EQ(output_problem(d.file("no/such/dir")),
            "cannot write '" + d.file("no/such/dir") + "': No such file or directory");
  // A link in a directory that cannot be written, to a place that can: the
  // target is what is written. (Root writes anywhere: the read-only
  // directory is a missing one instead.)
  fs::create_directory(d.path / "out");
  fs::create_symlink(d.file("out/result.json"), d.file("link"));
  EXPECT_EQ(output_problem(d.file("link")), "");
  fs::create_symlink(d.file("gone/result.json"), d.file("dangling"));
  EXPECT_EQ(output_problem(d.file("dangling")), "cannot write '" + d.file("dangling") + "': No such file or directory");
  // A loop of links: an error, and the links stay links.
  fs::create_symlink(d.file("loop_b"), d.file("loop_a"));
  fs::create_symlink(d.file("loop_a"), d.file("loop_b"));
  EXPECT_EQ(output_problem(d.file("loop_a")),
            "cannot write '" + d.file("loop_a") + "': Too many levels of symbolic links");
  EXPECT_THROW(write_text(d.file("loop_a"), "x\n"), std::runtime_error);
  EXPECT_TRUE(fs::is_symlink(d.file("loop_a")));
  size_t left = 0;
  for (const auto& e : fs::recursive_directory_iterator(d.path)) {
    const std::string n = e.path().filename().string();
    left += n != "out" && n != "link" && n != "dangling" && n != "loop_a" && n != "loop_b";
  }
  EXPECT_EQ(left, 0u);
}

// A relative link in a directory reached through a link resolves from where
// the link really is (as the kernel does), not from the name's text.
TEST(Files, ARelativeLinkBehindADirectoryLinkGoesWhereTheKernelSays) {
  Dir d;
  fs::create_directories(d.path / "real" / "sub");
  fs::create_directory_symlink(d.path / "real" / "sub", d.path / "dirlink");
  fs::create_symlink("../x.json", d.path / "real" / "sub" / "out.json");
  write_text(d.file("dirlink/out.json"), "here\n");
  EXPECT_EQ(slurp((d.path / "real" / "x.json").string()), "here\n");
  EXPECT_FALSE(fs::exists(d.path / "x.json"));
}

// The name of a descriptor (/dev/stdout, /dev/fd/N) is written through, and
// appended to (a shell's `>>` kept what was there), never replaced.
TEST(Files, ADescriptorsNameIsAppendedTo) {
  Dir d;
  write_text(d.file("log"), "before\n");
  const int fd = ::open(d.file("log").c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const std::string name = "/dev/fd/" + std::to_string(fd);
  EXPECT_EQ(output_problem(name), "");
  write_text(name, "after\n");
  ::close(fd);
  EXPECT_EQ(slurp(d.file("log")), "before\nafter\n");
}

}  // namespace
}  // namespace heaplab::common
