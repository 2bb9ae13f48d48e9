#include "common/progress.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace {

using heaplab::common::Progress;

// What a Progress writes to stderr (fd 2 redirected into a pipe meanwhile).
template <class F>
std::string stderr_of(F&& f) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return "pipe failed";
  const int saved = dup(2);
  dup2(p[1], 2);
  f();
  dup2(saved, 2);
  close(saved);
  close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(n));
  close(p[0]);
  return out;
}

// Nothing in the first 2 s; then the share, both counts grouped and the
// time left at the rate so far; the line is cleared at the end.
TEST(Progress, ShowsShareCountsAndTimeLeftAfterTwoSeconds) {
  setenv("HEAPLAB_PROGRESS", "1", 1);
  const std::string out = stderr_of([] {
    Progress p("building the replay plan", 1000000);
    p.update(100000);  // at once: nothing
    std::this_thread::sleep_for(std::chrono::milliseconds(2100));
    p.update(500000);
  });
  EXPECT_EQ(out, "\r\033[Kbuilding the replay plan: 50% (500,000 of 1,000,000 events), 2 s left\r\033[K");
}

// Off (HEAPLAB_PROGRESS=0, or stderr not a terminal): nothing at all.
TEST(Progress, OffSaysNothing) {
  setenv("HEAPLAB_PROGRESS", "0", 1);
  const std::string out = stderr_of([] {
    Progress p("stats", 10, "calls");
    p.update(5);
    p.finish();
  });
  EXPECT_EQ(out, "");
}

}  // namespace
