#include "replay/footprint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace heaplab::replay {

namespace {

constexpr size_t kText = 65536;        // bytes of /proc/self/maps read at a time (+ one line)
constexpr size_t kLine = 4096;         // longest line kept (the path beyond is not needed)
constexpr size_t kChunkPages = 65536;  // pages per mincore call

uint64_t hex(const char*& p) {
  uint64_t v = 0;
  for (;; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9')
      v = v * 16 + uint64_t(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = v * 16 + uint64_t(c - 'a' + 10);
    else
      return v;
  }
}

}  // namespace

FootprintCounter::FootprintCounter() {
  page_ = uint64_t(sysconf(_SC_PAGESIZE));
  void* t = mmap(nullptr, kText + kLine, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  void* v = mmap(nullptr, kChunkPages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (t == MAP_FAILED || v == MAP_FAILED) throw std::runtime_error("cannot map the footprint counter's buffers");
  text_ = static_cast<char*>(t);
  vec_ = static_cast<unsigned char*>(v);
  exclude(text_, kText + kLine);
  exclude(vec_, kChunkPages);
}

FootprintCounter::~FootprintCounter() {
  munmap(text_, kText + kLine);
  munmap(vec_, kChunkPages);
  if (entries_) munmap(entries_, kChunkPages * sizeof(uint64_t));
  if (pagemap_fd_ >= 0) close(pagemap_fd_);
}

uint64_t FootprintCounter::mapped_bytes() const {
  const auto up = [&](uint64_t b) { return (b + page_ - 1) / page_ * page_; };
  return up(kText + kLine) + up(kChunkPages) + (entries_ ? up(kChunkPages * sizeof(uint64_t)) : 0);
}

bool FootprintCounter::clear_soft_dirty() {
  const int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, "4", 1) == 1;
  close(fd);
  return ok;
}

bool FootprintCounter::enable_soft_dirty(std::string& why) {
  if (entries_) return true;
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    why = std::string("cannot read /proc/self/pagemap: ") + std::strerror(errno);
    return false;
  }
  // A page of our own: written after the bits are cleared, it must read
  // soft-dirty (bit 55).
  auto* probe =
      static_cast<volatile char*>(mmap(nullptr, page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (probe == MAP_FAILED) {
    close(fd);
    why = "cannot map a probe page";
    return false;
  }
  probe[0] = 1;
  bool ok = false;
  if (!clear_soft_dirty()) {
    why = std::string("cannot write /proc/self/clear_refs: ") + std::strerror(errno);
  } else {
    probe[0] = 2;
    uint64_t e = 0;
    const off_t at = off_t(reinterpret_cast<uintptr_t>(probe) / page_ * sizeof e);
    if (pread(fd, &e, sizeof e, at) != ssize_t(sizeof e))
      why = std::string("cannot read /proc/self/pagemap: ") + std::strerror(errno);
    else if (!(e >> 55 & 1))
      why = "the kernel keeps no soft-dirty bits (CONFIG_MEM_SOFT_DIRTY is off)";
    else
      ok = true;
  }
  munmap(const_cast<char*>(probe), page_);
  if (ok) {
    void* m = mmap(nullptr, kChunkPages * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) {
      why = "cannot map the pagemap buffer";
      ok = false;
    } else {
      entries_ = static_cast<uint64_t*>(m);
      exclude(entries_, kChunkPages * sizeof(uint64_t));
    }
  }
  if (ok)
    pagemap_fd_ = fd;
  else
    close(fd);
  return ok;
}

void FootprintCounter::exclude(const void* begin, size_t len) {
  if (excluded_ == kMaxExcluded || len == 0) return;
  const auto b = reinterpret_cast<uintptr_t>(begin) & ~uintptr_t(page_ - 1);
  ex_begin_[excluded_] = b;
  ex_end_[excluded_] = (reinterpret_cast<uintptr_t>(begin) + len + page_ - 1) & ~uintptr_t(page_ - 1);
  ++excluded_;
}

void FootprintCounter::count_range(uintptr_t begin, uintptr_t end, bool soft_dirty, uint64_t& pages) {
  for (uintptr_t a = begin; a < end;) {
    const size_t n = std::min<size_t>(kChunkPages, (end - a) / page_);
    if (soft_dirty) {
      // pagemap: bit 55 soft-dirty, bit 62 swapped, bit 63 present.
      const ssize_t got = pread(pagemap_fd_, entries_, n * sizeof(uint64_t), off_t(a / page_ * sizeof(uint64_t)));
      for (size_t i = 0; got > 0 && i < size_t(got) / sizeof(uint64_t); ++i)
        pages += (entries_[i] >> 55 & 1) && (entries_[i] >> 62 & 3);
    } else if (mincore(reinterpret_cast<void*>(a), n * page_, vec_) == 0) {
      for (size_t i = 0; i < n; ++i) pages += vec_[i] & 1;
    }
    a += n * page_;
  }
}

int64_t FootprintCounter::count(bool soft_dirty) {
  if (soft_dirty && !entries_) return -1;
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  uint64_t pages = 0;
  size_t carry = 0;  // bytes of an unfinished line at the start of text_
  for (;;) {
    const ssize_t got = read(fd, text_ + carry, kText);
    if (got < 0) {
      close(fd);
      return -1;
    }
    const size_t len = carry + size_t(got);
    size_t start = 0;
    for (size_t i = 0; i < len; ++i) {
      if (text_[i] != '\n') continue;
      text_[i] = 0;
      // "start-end perms offset dev inode path"
      const char* p = text_ + start;
      start = i + 1;
      const uintptr_t b = hex(p);
      if (*p++ != '-') continue;
      const uintptr_t e = hex(p);
      if (*p++ != ' ') continue;
      const char* perms = p;
      if (std::strlen(perms) < 4 || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p') continue;
      // Skip perms, offset, dev; then the inode must be 0 and the path
      // empty or [heap].
      int fields = 0;
      while (*p && fields < 3) {
        if (*p == ' ') {
          ++fields;
          while (*p == ' ') ++p;
        } else {
          ++p;
        }
      }
      if (*p != '0' || (p[1] != ' ' && p[1] != 0)) continue;
      ++p;
      while (*p == ' ') ++p;
      if (*p && std::strcmp(p, "[heap]") != 0) continue;
      uint64_t in_mapping = 0;
      count_range(b, e, soft_dirty, in_mapping);
      for (size_t k = 0; k < excluded_; ++k) {
        const uintptr_t lo = std::max(b, ex_begin_[k]), hi = std::min(e, ex_end_[k]);
        if (lo < hi) {
          uint64_t ex = 0;
          count_range(lo, hi, soft_dirty, ex);
          in_mapping -= std::min(in_mapping, ex);
        }
      }
      pages += in_mapping;
    }
    if (got == 0) break;
    // Keep the unfinished line (the part a line needs; a longer path is cut).
    carry = std::min(len - start, kLine);
    std::memmove(text_, text_ + start, carry);
  }
  close(fd);
  return int64_t(pages);
}

}  // namespace heaplab::replay
