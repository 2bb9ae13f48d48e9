// The program's memory records of a capture put in trace order without
// holding them all (MemoryMap): records come with a sort key; up to `run`
// of them are held (96 bytes each), then sorted and written to a scratch
// file as a run (a batch at a time by columns of differences, zstd at its
// fastest level: under 3 bytes a record, a merge's runs and their output
// counted together); at the end the runs are merged a record at a time.
// kMaxRuns runs of one level are merged into one run of the next as soon
// as there are that many (and their room in the file given back), so a
// record is written again about log16 of the runs times, and a merge reads
// at most kMaxRuns runs at once: about 0.7 MiB each (zstd's buffers and a
// batch). So at most about 36 MiB in all, however many records. The
// scratch file is unlinked as soon as it is made. Throws
// std::runtime_error, naming the scratch directory, when it cannot be
// written or read.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capture/format/memory_event.h"

namespace heaplab::normalise {

class MemorySorter {
 public:
  static constexpr size_t kDefaultRun = size_t{1} << 18;
  static constexpr size_t kMaxRuns = 16;
  // `dir`: where the scratch file goes (made at the first spill).
  explicit MemorySorter(std::string dir, size_t run = kDefaultRun);
  ~MemorySorter();
  MemorySorter(const MemorySorter&) = delete;
  MemorySorter& operator=(const MemorySorter&) = delete;

  // Records with equal keys keep the order they were pushed in.
  void push(uint64_t major, uint64_t minor, const trace::MemoryEvent& e);
  uint64_t size() const { return pushed_; }
  // After the last push: the next record in key order; false at the end.
  bool next(trace::MemoryEvent& e);
  // Runs written to the scratch file so far (merges included).
  uint64_t runs_written() const { return runs_written_; }
  // The scratch file's disk at its largest: the bytes of the runs it held at
  // once (a merge's runs count until their room is given back, after the
  // run they make is written; for good where the file system cannot punch
  // holes). 0 if nothing was spilled.
  uint64_t scratch_peak_bytes() const { return peak_bytes_; }
  // All it wrote to the scratch file (runs and merges).
  uint64_t scratch_written_bytes() const { return file_end_; }

  struct Key {
    uint64_t major = 0, minor = 0, seq = 0;
    auto operator<=>(const Key&) const = default;
  };
  struct Item {
    Key key;
    trace::MemoryEvent e;
  };
  struct Run {
    uint64_t offset = 0, length = 0, count = 0;  // in the scratch file
    unsigned level = 0;                          // 0: sorted in memory; n + 1: merged from kMaxRuns of level n
  };
  class RunReader;

 private:
  void spill();
  void write_run(const std::vector<RunReader*>& from, const std::vector<Item>* sorted, unsigned level);
  void start_merge();
  [[noreturn]] void fail(const std::string& what) const;

  std::string dir_;
  size_t run_;
  int fd_ = -1;
  uint64_t file_end_ = 0;
  uint64_t pushed_ = 0, runs_written_ = 0;
  uint64_t held_bytes_ = 0, peak_bytes_ = 0;  // the runs' bytes in the file: now, at most
  std::vector<Item> buf_;
  std::vector<Run> runs_;
  // Merging: a reader a run and the last records, still in memory.
  bool merging_ = false;
  std::vector<std::unique_ptr<RunReader>> readers_;
  size_t mem_pos_ = 0;
  struct Merger;  // the final merge (memory_sorter.cpp)
  std::unique_ptr<Merger> merge_;
};

}  // namespace heaplab::normalise
