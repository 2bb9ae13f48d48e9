#include "capture/normalise/raw_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace heaplab::normalise {

using namespace heaplab::raw;

namespace {
[[noreturn]] void fail(const std::string& path, const std::string& what) { throw RawError(path + ": " + what); }
}  // namespace

RawFile::Mapping RawFile::map_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(path, std::strerror(e));
  }
  Mapping m;
  m.size = uint64_t(st.st_size);
  if (m.size == 0) {
    ::close(fd);
    return m;
  }
  void* p = mmap(nullptr, m.size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  m.data = static_cast<const uint8_t*>(p);
  return m;
}

RawFile::RawFile(const std::string& path) : path_(path) {
  ring_ = map_file(path);
  if (ring_.size < kBlockSize)  // the shim sizes the file to the header block at once
    fail(path, "not a heaplab raw capture (file too short: " + std::to_string(ring_.size) + " bytes)");
  header_ = reinterpret_cast<const FileHeader*>(ring_.data);
  const FileHeader& h = *header_;
  check_header(h, path);
  if (h.consumed_blocks != 0)
    fail(path, "raw capture partly normalised already while the program ran (" + std::to_string(h.consumed_blocks) +
                   " blocks deleted): normalising the rest would lose calls silently");
  std::string blocks_path = path + ".blocks";
  appended_fd_ = ::open(blocks_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (appended_fd_ < 0 && errno != ENOENT) fail(blocks_path, std::strerror(errno));
  // Without it, its calls would read as frees of memory allocated before capture.
  if (appended_fd_ < 0 && h.data_blocks > 0)
    fail(blocks_path, "missing, but the capture appended " + std::to_string(h.data_blocks) +
                          " blocks to it (copy it along with " + path + ")");
  uint64_t appended_size = 0;
  if (appended_fd_ >= 0) {
    struct stat st;
    if (fstat(appended_fd_, &st) != 0) fail(blocks_path, std::strerror(errno));
    appended_size = uint64_t(st.st_size);
  }

  // A thread writes only after its block is in the file, so slots beyond
  // the file (a corrupt or cut-off header) hold nothing. Thread numbers:
  // raw::thread_numbers.
  uint64_t in_ring = (ring_.size - kBlockSize) / kBlockSize;
  uint32_t nthreads = uint32_t(std::min<uint64_t>(h.next_thread, in_ring));
  std::vector<RawThread> by_thread(thread_numbers(nthreads, h.threads));
  auto valid = [&](const BlockHeader& b) { return b.magic == kBlockMagic && b.thread < by_thread.size(); };
  // Appended blocks: only whole ones (a cut-off last one is still whole in the mapping).
  for (uint64_t b = 0; b < appended_size / kBlockSize; ++b) {
    BlockRef ref;
    ref.offset = b * kBlockSize;
    if (pread(appended_fd_, &ref.header, sizeof ref.header, off_t(ref.offset)) != sizeof ref.header)
      fail(blocks_path, "cannot read block " + std::to_string(b));
    if (valid(ref.header)) by_thread[ref.header.thread].blocks.push_back(ref);
  }
  // Blocks in the mapping: each thread's current one, the complete copy if
  // its seq was also appended (it is cleared, magic first, after the append).
  for (uint64_t s = 0; s < nthreads; ++s) {
    BlockRef ref;
    ref.mapped = ring_.data + kBlockSize * (s + 1);
    std::memcpy(&ref.header, ref.mapped, sizeof ref.header);
    // A thread's current block, or (with a live reader) a full one left for
    // it, or one a signal handler moved its thread off (sink_file.cpp,
    // switch_block).
    if (valid(ref.header)) by_thread[ref.header.thread].blocks.push_back(ref);
  }
  for (uint32_t s = 0; s < by_thread.size(); ++s) {
    RawThread& t = by_thread[s];
    if (t.blocks.empty()) continue;
    // Sort by seq; for equal seqs the mapped copy (pushed last) wins.
    std::stable_sort(t.blocks.begin(), t.blocks.end(), [](const BlockRef& a, const BlockRef& b) {
      return a.header.thread_block_seq < b.header.thread_block_seq;
    });
    std::vector<BlockRef> unique;
    for (const BlockRef& b : t.blocks) {
      if (!unique.empty() && unique.back().header.thread_block_seq == b.header.thread_block_seq)
        unique.back() = b;
      else
        unique.push_back(b);
    }
    t.blocks = std::move(unique);
    for (size_t i = 0; i < t.blocks.size(); ++i) {
      uint64_t expect = i == 0 ? 0 : t.blocks[i - 1].header.thread_block_seq + 1;
      missing_ += t.blocks[i].header.thread_block_seq - expect;
    }
    blocks_ += t.blocks.size();
    t.slot = s;
    t.tid = t.blocks.front().header.tid;
    const char* name = t.blocks.back().header.name;
    t.name.assign(name, strnlen(name, sizeof t.blocks.back().header.name));
    threads_.push_back(std::move(t));
  }
}

RawFile::RawFile(const std::string& label, const void* header_block)
    : path_(label),
      owned_(static_cast<const uint8_t*>(header_block), static_cast<const uint8_t*>(header_block) + kBlockSize) {
  ring_.data = owned_.data();
  ring_.size = owned_.size();
  header_ = reinterpret_cast<const FileHeader*>(ring_.data);
  check_header(*header_, label);
  if (header_->next_thread != 0 || header_->data_blocks != 0)
    fail(label, "a spare header that claims threads or blocks (" + std::to_string(header_->next_thread) + ", " +
                    std::to_string(header_->data_blocks) + ")");
}

RawFile::~RawFile() {
  if (ring_.data && owned_.empty()) munmap(const_cast<uint8_t*>(ring_.data), ring_.size);
  if (appended_fd_ >= 0) ::close(appended_fd_);
}

void RawFile::read_block(const BlockRef& b, uint8_t* buf) const {
  uint64_t done = 0;
  while (done < kBlockSize) {
    ssize_t n = pread(appended_fd_, buf + done, kBlockSize - done, off_t(b.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail(path_ + ".blocks", "cannot read block at offset " + std::to_string(b.offset));
    done += uint64_t(n);
  }
}

void check_header(const FileHeader& h, const std::string& path) {
  if (std::memcmp(h.magic, kFileMagic, sizeof h.magic) != 0) fail(path, "not a heaplab raw capture (bad magic)");
  if (h.version != kVersion)
    fail(path, "unsupported raw capture version " + std::to_string(h.version) + " (this heaplab reads " +
                   std::to_string(kVersion) + ")");
  if (h.header_size != kBlockSize || h.block_size != kBlockSize || h.record_size != kRecordSize)
    fail(path, "raw capture has an unexpected block layout");
  if (h.clock != kClockTsc && h.clock != kClockMonotonic)
    fail(path, "raw capture names an unknown clock " + std::to_string(h.clock));
}

std::unique_ptr<RecordCursor> RawFile::cursor(size_t thread) {
  return std::make_unique<RawThreadCursor>(*this, threads_[thread]);
}

std::vector<std::string> argv_of(const FileHeader& h) {
  std::vector<std::string> argv;
  uint32_t len = std::min<uint32_t>(h.cmdline_len, uint32_t(kCmdlineMax));
  const char* p = h.cmdline;
  const char* end = p + len;
  while (p < end) {
    const char* z = static_cast<const char*>(std::memchr(p, 0, size_t(end - p)));
    if (!z) z = end;
    argv.emplace_back(p, z);
    p = z + 1;
  }
  return argv;
}

std::vector<std::string> RawFile::command_line() const { return argv_of(*header_); }

double RawFile::ns_per_tick() const {
  const FileHeader& h = *header_;
  if (h.clock == kClockMonotonic) return 1.0;
  uint64_t t0 = h.start_ticks, m0 = h.start_mono_ns, t1 = t0, m1 = m0;
  auto consider = [&](uint64_t t, uint64_t m) {
    if (t > t1 && m > m1) {
      t1 = t;
      m1 = m;
    }
  };
  if (h.end_ticks) consider(h.end_ticks, h.end_mono_ns);
  for (const RawThread& t : threads_)
    for (const BlockRef& b : t.blocks) consider(b.header.ticks, b.header.mono_ns);
  if (m1 - m0 < 1000000) return 0;  // under 1 ms apart: too imprecise
  return double(m1 - m0) / double(t1 - t0);
}

void RawThreadCursor::load_block() {
  for (;;) {
    cur_ = end_ = nullptr;
    if (block_ >= t_->blocks.size()) return;
    if (buf_.size() != kBlockSize) buf_.assign(kBlockSize, 0);  // (cut to its records by the last load)
    const BlockRef& b = t_->blocks[block_];
    if (b.mapped) {
      // Copy, then check the block is still the one listed: a process still
      // running (a followed child) may have appended and reused it since.
      std::memcpy(buf_.data(), b.mapped, kBlockSize);
      BlockHeader now;
      std::memcpy(&now, buf_.data(), sizeof now);
      if (now.magic != b.header.magic || now.thread_block_seq != b.header.thread_block_seq) {
        ++changed_;
        ++block_;
        continue;
      }
    } else {
      f_->read_block(b, buf_.data());
    }
    cur_ = reinterpret_cast<const Record*>(buf_.data() + kBlockHeaderSize);
    end_ = reinterpret_cast<const Record*>(buf_.data() + kBlockSize);
    // A block mostly unused (a thread's last; a thread that made a few
    // calls has no other) is kept only as far as its last complete record:
    // every thread's cursor holds its current block from the start of a
    // merge, and 64 KiB each for a program that ran 100,000 threads of a
    // few calls was 6.5 GB. (The zero tail is no hole: nothing follows it.)
    const Record* last = end_;
    while (last != cur_ && last[-1].head == 0) --last;
    const size_t used = size_t(reinterpret_cast<const uint8_t*>(last) - buf_.data());
    if (used <= kBlockSize / 4) {
      std::vector<uint8_t>(buf_.begin(), buf_.begin() + std::ptrdiff_t(used)).swap(buf_);
      cur_ = reinterpret_cast<const Record*>(buf_.data() + kBlockHeaderSize);
      end_ = reinterpret_cast<const Record*>(buf_.data() + used);
    }
    return;
  }
}

const Record* RawThreadCursor::next() {
  for (;;) {
    if (cur_ == end_) {
      if (block_ >= t_->blocks.size()) return nullptr;
      ++block_;
      load_block();
      if (!cur_) return nullptr;
      continue;
    }
    if (cur_->head) return cur_++;
    // A zero record: the block's unused tail, or a hole before later records.
    const Record* z = cur_;
    while (z != end_ && z->head == 0) ++z;
    if (z != end_) holes_ += uint64_t(z - cur_);
    cur_ = z;
  }
}

}  // namespace heaplab::normalise
