// Progress with an ETA on a terminal, for stages that can take more than a
// few seconds (normalising, importing, building a plan, replaying, stats,
// check):
//
//   building the replay plan: 41% (412,000,000 of 1,000,000,000 events), 38 s left
//
// written to stderr over one line (\r), at most twice a second, only when
// stderr is a terminal and the stage has run for 2 s; the line is cleared
// when the stage ends. update() is cheap enough for a hot loop (a counter;
// the clock is read every 65,536 updates' worth of work), allocates
// nothing, and is safe from any one thread at a time. HEAPLAB_PROGRESS=0
// turns it off, =1 on (even without a terminal: for tests).
#pragma once

#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace heaplab::common {

class Progress {
 public:
  Progress(const char* what, uint64_t total, const char* unit = "events") : what_(what), unit_(unit), total_(total) {
    const char* env = std::getenv("HEAPLAB_PROGRESS");
    on_ = env && *env ? std::strcmp(env, "0") != 0 : isatty(2) == 1;
    start_ = now();
    last_ = start_;
  }
  ~Progress() { finish(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` of the total so far.
  void update(uint64_t done) {
    if (!on_ || done - checked_ < 65536) return;
    checked_ = done;
    const double t = now();
    if (t - start_ < 2.0 || t - last_ < 0.5) return;
    last_ = t;
    show(done, t);
  }
  // Clears the line (if one was shown).
  void finish() {
    if (!shown_) return;
    shown_ = false;
    const char clear[] = "\r\033[K";
    if (write(2, clear, sizeof clear - 1) < 0) {
    }
  }

 private:
  static double now() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
  }
  static void group(char* out, size_t n, uint64_t v) {
    char digits[32];
    const int len = std::snprintf(digits, sizeof digits, "%llu", static_cast<unsigned long long>(v));
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; ++i) {
      if (i > 0 && (len - i) % 3 == 0) out[o++] = ',';
      out[o++] = digits[i];
    }
    out[o] = 0;
  }
  void show(uint64_t done, double t) {
    char d[32], tot[32], left[48] = "";
    group(d, sizeof d, done);
    group(tot, sizeof tot, total_);
    const double share = total_ ? double(done) / double(total_) : 0.0;
    if (done > 0 && done < total_) {
      const double rest = (t - start_) * double(total_ - done) / double(done);
      if (rest >= 90)
        std::snprintf(left, sizeof left, ", %.0f min left", rest / 60);
      else
        std::snprintf(left, sizeof left, ", %.0f s left", rest);
    }
    char line[256];
    const int n = std::snprintf(line, sizeof line, "\r\033[K%s: %.0f%% (%s of %s %s)%s", what_, 100.0 * share, d, tot,
                                unit_, left);
    if (n > 0 && write(2, line, size_t(n) < sizeof line ? size_t(n) : sizeof line - 1) > 0) shown_ = true;
  }

  const char* what_;
  const char* unit_;
  uint64_t total_;
  uint64_t checked_ = 0;
  double start_ = 0, last_ = 0;
  bool on_ = false, shown_ = false;
};

}  // namespace heaplab::common
