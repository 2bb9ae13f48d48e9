// Tests of the process module: exec failures reported in the parent, the
// environment, descriptors and standard streams as asked, statuses named,
// and no child left behind.
#include "common/process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <string>

namespace heaplab::process {
namespace {

Spec sh(const std::string& script) {
  Spec s;
  s.argv = {"/bin/sh", "-c", script};
  return s;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + "." + std::to_string(::getpid()))).string();
}

TEST(Process, RunCollectsStdoutAndStderrApart) {
  Spec s = sh("echo out; echo err >&2; exit 3");
  s.out = Stdio::pipe;
  s.err = Stdio::pipe;
  const Output o = run(s);
  EXPECT_EQ(o.out, "out\n");
  EXPECT_EQ(o.err, "err\n");
  EXPECT_EQ(exit_code(o.status), 3);
  EXPECT_FALSE(succeeded(o.status));
  EXPECT_EQ(describe_status(o.status), "exit 3");
}

// The timed read_all: everything up to the end, or false when a writer that
// never closes outlives the time given (what came is kept).
TEST(Process, ReadAllWithinATime) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "abc", 3), 3);
  close(fds[1]);
  std::string out;
  EXPECT_TRUE(read_all(fds[0], out, 5.0));
  EXPECT_EQ(out, "abc");
  close(fds[0]);

  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "de", 2), 2);  // the write end stays open
  out.clear();
  EXPECT_FALSE(read_all(fds[0], out, 0.2));
  EXPECT_EQ(out, "de");
  close(fds[0]);
  close(fds[1]);
}

TEST(Process, LargeOutputOnBothStreamsDoesNotStall) {
  // 1 MiB on each stream: more than a pipe holds, so both must be read at once.
  Spec s = sh("head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2");
  s.out = Stdio::pipe;
  s.err = Stdio::pipe;
  const Output o = run(s);
  EXPECT_EQ(o.out.size(), 1048576u);
  EXPECT_EQ(o.err.size(), 1048576u);
  EXPECT_TRUE(succeeded(o.status));
}

TEST(Process, ExecFailureIsAnErrorInTheParent) {
  Spec s;
  s.argv = {"/nonexistent/program", "x"};
  try {
    spawn(s);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_STREQ(e.what(), "cannot run '/nonexistent/program': No such file or directory");
    EXPECT_EQ(e.err(), ENOENT);
    EXPECT_TRUE(e.exec_failed());
  }
}

TEST(Process, SearchPathFindsProgramsByName) {
  Spec s;
  s.argv = {"sh", "-c", "exit 0"};
  EXPECT_THROW(spawn(s), SpawnError);  // no PATH lookup unless asked
  s.search_path = true;
  Child c = spawn(s);
  EXPECT_TRUE(succeeded(c.wait()));
}

TEST(Process, EnvironmentSetAndUnsetOnTopOfTheParents) {
  ::setenv("HEAPLAB_PROCESS_TEST_KEEP", "kept", 1);
  ::setenv("HEAPLAB_PROCESS_TEST_DROP", "dropped", 1);
  Spec s = sh("echo \"$HEAPLAB_PROCESS_TEST_KEEP ${HEAPLAB_PROCESS_TEST_DROP-unset} $HEAPLAB_PROCESS_TEST_NEW\"");
  s.out = Stdio::pipe;
  s.env = {{"HEAPLAB_PROCESS_TEST_DROP", std::nullopt}, {"HEAPLAB_PROCESS_TEST_NEW", "new"}};
  EXPECT_EQ(run(s).out, "kept unset new\n");
  EXPECT_STREQ(std::getenv("HEAPLAB_PROCESS_TEST_DROP"), "dropped");  // the parent's stays
}

TEST(Process, ChildKnowsItsOwnPid) {
  Spec s = sh("echo $HEAPLAB_PROCESS_TEST_PID $$");
  s.out = Stdio::pipe;
  s.env_own_pid = "HEAPLAB_PROCESS_TEST_PID";
  Child c = spawn(s);
  std::string got;
  read_all(c.stdout_fd(), got);
  c.wait();
  EXPECT_EQ(got, std::to_string(c.pid()) + " " + std::to_string(c.pid()) + "\n");
}

TEST(Process, DescriptorsHandedToTheChild) {
  Pipe p;
  Spec s = sh("echo hello >&4");
  s.fds = {{4, p.write}};
  Child c = spawn(s);
  p.close_write();
  std::string got;
  read_all(p.read, got);
  EXPECT_EQ(got, "hello\n");
  EXPECT_TRUE(succeeded(c.wait()));
}

// Targets above the parking area, and targets that are each other's
// sources (found by review: parked copies used to sit at 64 and up).
TEST(Process, HighAndCrossingDescriptors) {
  Pipe a, b;
  Spec s = sh("echo A >&64; echo B >&65");
  s.argv[0] = "/bin/bash";  // dash takes single-digit descriptors only
  s.fds = {{64, a.write}, {65, b.write}};
  Child c = spawn(s);
  a.close_write();
  b.close_write();
  std::string ga, gb;
  read_all(a.read, ga);
  read_all(b.read, gb);
  EXPECT_TRUE(succeeded(c.wait()));
  EXPECT_EQ(ga, "A\n");
  EXPECT_EQ(gb, "B\n");
  // Each target is the other's source.
  Pipe p, q;
  const int fp = ::fcntl(p.write, F_DUPFD, 70), fq = ::fcntl(q.write, F_DUPFD, 71);
  ASSERT_EQ(fp, 70);
  ASSERT_EQ(fq, 71);
  Spec x = sh("echo P >&71; echo Q >&70");
  x.argv[0] = "/bin/bash";
  x.fds = {{71, fp}, {70, fq}};
  Child d = spawn(x);
  ::close(fp);
  ::close(fq);
  p.close_write();
  q.close_write();
  std::string gp, gq;
  read_all(p.read, gp);
  read_all(q.read, gq);
  EXPECT_TRUE(succeeded(d.wait()));
  EXPECT_EQ(gp, "P\n");
  EXPECT_EQ(gq, "Q\n");
}

// With the parent's standard streams closed, the error pipe may sit on fd
// 0-2: an exec failure is still reported, and nothing leaks into a pipe.
TEST(Process, ExecFailureReportedWithTheParentsStdioClosed) {
  Spec probe;
  probe.argv = {"/proc/self/exe", "--gtest_filter=Process.ExecFailureHelper"};
  probe.env = {{"HEAPLAB_PROCESS_TEST_HELPER", "1"}};
  probe.out = Stdio::pipe;
  const Output o = run(probe);
  EXPECT_TRUE(succeeded(o.status)) << o.out;
  EXPECT_NE(o.out.find("helper: SpawnError: cannot run '/nonexistent/prog': No such file or directory"),
            std::string::npos)
      << o.out;
}

TEST(Process, ExecFailureHelper) {
  if (!std::getenv("HEAPLAB_PROCESS_TEST_HELPER"))
    GTEST_SKIP() << "run by ExecFailureReportedWithTheParentsStdioClosed";
  const int keep = ::dup(1);
  ::close(0);
  ::close(2);
  Spec s;
  s.argv = {"/nonexistent/prog"};
  s.err = Stdio::pipe;
  std::string what = "no SpawnError";
  try {
    run(s);
  } catch (const SpawnError& e) {
    what = std::string("SpawnError: ") + e.what();
  }
  const std::string line = "helper: " + what + "\n";
  ASSERT_EQ(::write(keep, line.data(), line.size()), ssize_t(line.size()));
}

// A child that cannot be waited for is no success (SIGCHLD ignored: the
// kernel reaps it).
TEST(Process, AWaitThatFailsIsNoSuccess) {
  struct sigaction ign {
  }, old{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGCHLD, &ign, &old);
  Child c = spawn(sh("exit 0"));
  const int st = c.wait();
  ::sigaction(SIGCHLD, &old, nullptr);
  EXPECT_TRUE(c.wait_failed());
  EXPECT_FALSE(succeeded(st));
  EXPECT_EQ(describe_status(st), "exit 127");
}

TEST(Process, SignalsIgnoredAndUnblockedInTheChild) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &block, &old);
  Spec s = sh("grep -E '^Sig(Ign|Blk)' /proc/self/status");
  s.out = Stdio::pipe;
  s.ignore_signals = {SIGHUP};
  s.unblock_signals = {SIGUSR1};
  const std::string out = run(s).out;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  // SIGHUP is signal 1 (bit 0), SIGUSR1 signal 10 (bit 9).
  unsigned long ign = 0, blk = 0;
  ASSERT_EQ(std::sscanf(out.c_str(), "SigBlk: %lx\nSigIgn: %lx", &blk, &ign), 2) << out;
  EXPECT_TRUE(ign & 1u) << out;
  EXPECT_FALSE(blk & (1u << 9)) << out;
}

TEST(Process, CloseOnExecDescriptorsStayClosed) {
  Pipe p;  // close-on-exec, not handed over
  Spec s = sh("echo x >&" + std::to_string(p.write) + " 2>/dev/null && exit 0; exit 9");
  s.err = Stdio::null;
  Child c = spawn(s);
  EXPECT_EQ(exit_code(c.wait()), 9);
}

TEST(Process, StdioFilesAndNull) {
  const std::string in = temp_path("heaplab-process-in"), out = temp_path("heaplab-process-out");
  std::ofstream(in) << "from a file\n";
  Spec s = sh("cat; echo to-err >&2");
  s.in = Stdio::file;
  s.in_file = in;
  s.out = Stdio::file;
  s.out_file = out;
  s.err = Stdio::to_out;
  Child c = spawn(s);
  EXPECT_TRUE(succeeded(c.wait()));
  std::ifstream f(out);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "from a file\nto-err\n");
  std::remove(in.c_str());
  std::remove(out.c_str());
}

TEST(Process, UnopenableFileIsNamed) {
  Spec s = sh("true");
  s.out = Stdio::file;
  s.out_file = "/nonexistent-dir/out";
  try {
    spawn(s);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_STREQ(e.what(), "cannot run '/bin/sh': cannot open '/nonexistent-dir/out': No such file or directory");
    EXPECT_FALSE(e.exec_failed());
  }
}

TEST(Process, WorkingDirectory) {
  Spec s = sh("pwd");
  s.out = Stdio::pipe;
  s.cwd = "/usr";
  EXPECT_EQ(run(s).out, "/usr\n");
  s.cwd = "/nonexistent-dir";
  try {
    run(s);
    FAIL() << "no error";
  } catch (const SpawnError& e) {
    EXPECT_STREQ(e.what(),
                 "cannot run '/bin/sh': cannot change to directory '/nonexistent-dir': No such file or directory");
  }
}

TEST(Process, StdinPipeEndsWhenClosed) {
  Spec s = sh("wc -c");
  s.in = Stdio::pipe;
  s.out = Stdio::pipe;
  Child c = spawn(s);
  ASSERT_EQ(::write(c.stdin_fd(), "12345", 5), 5);
  c.close_stdin();
  std::string got;
  read_all(c.stdout_fd(), got);
  EXPECT_EQ(got, "5\n");
  EXPECT_TRUE(succeeded(c.wait()));
}

TEST(Process, SignalStatusNamed) {
  Spec s = sh("kill -SEGV $$");
  const int st = run(s).status;
  EXPECT_EQ(exit_code(st), 128 + SIGSEGV);
  EXPECT_EQ(describe_status(st), "signal 11 (SIGSEGV)");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
}

TEST(Process, AbandonedChildIsKilledAndReaped) {
  pid_t pid;
  {
    Child c = spawn(sh("sleep 100"));
    pid = c.pid();
    ASSERT_GT(pid, 0);
  }
  // Reaped by the destructor: the pid is no child of ours any more.
  EXPECT_EQ(wait_for(pid, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(Process, WaitIsIdempotentAndMovable) {
  Child a = spawn(sh("exit 4"));
  Child b = std::move(a);
  EXPECT_EQ(a.pid(), -1);
  EXPECT_EQ(exit_code(b.wait()), 4);
  EXPECT_EQ(exit_code(b.wait()), 4);
  EXPECT_TRUE(b.waited());
}

}  // namespace
}  // namespace heaplab::process
