#include "allocators/linked.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

namespace heaplab::allocators {

namespace {

// The allocator a DT_NEEDED soname is, by its name.
std::string allocator_of(const std::string& soname) {
  static const std::pair<const char*, const char*> known[] = {
      {"libjemalloc.", "jemalloc"}, {"libtcmalloc", "tcmalloc"},    {"libmimalloc.", "mimalloc"},
      {"libhoard.", "hoard"},       {"libtbbmalloc.", "tbbmalloc"}, {"libsnmallocshim", "snmalloc"},
      {"librpmalloc.", "rpmalloc"}};
  for (const auto& [prefix, name] : known)
    if (soname.rfind(prefix, 0) == 0) return name;
  return "";
}

// An allocator's own function (not malloc's standard family).
bool own_function(const std::string& s) {
  static const char* jemalloc[] = {"mallocx",          "rallocx",      "xallocx",           "sallocx",
                                   "dallocx",          "sdallocx",     "nallocx",           "mallctl",
                                   "mallctlnametomib", "mallctlbymib", "malloc_stats_print"};
  for (const char* j : jemalloc)
    if (s == j) return true;
  return s.rfind("mi_", 0) == 0 || s.rfind("tc_", 0) == 0 || s.rfind("je_", 0) == 0 ||
         s.rfind("_ZN15MallocExtension", 0) == 0 || s.rfind("MallocExtension_", 0) == 0;
}

// Reads of the file by offset, bounded: never the whole of a large binary.
class File {
 public:
  explicit File(const std::string& path) {
    struct stat st;
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd_ >= 0 && (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode))) {
      ::close(fd_);
      fd_ = -1;
    }
    size_ = fd_ >= 0 ? uint64_t(st.st_size) : 0;
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool read(uint64_t off, void* out, uint64_t n) const {
    if (off > size_ || n > size_ - off) return false;
    return ::pread(fd_, out, n, off_t(off)) == ssize_t(n);
  }
  // A section's bytes, if it lies inside the file and is not absurdly big.
  bool section(const Elf64_Shdr& s, std::string& out) const {
    if (s.sh_size > (64u << 20)) return false;
    out.resize(s.sh_size);
    return read(s.sh_offset, out.data(), s.sh_size);
  }

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

std::string string_at(const std::string& strtab, uint64_t index) {
  if (index >= strtab.size()) return "";
  const char* p = strtab.data() + index;
  return std::string(p, strnlen(p, strtab.size() - index));
}

}  // namespace

std::optional<ProgramAllocator> program_allocator(const std::string& path) {
  const File file(path);
  if (!file.ok()) return std::nullopt;
  Elf64_Ehdr eh;
  if (!file.read(0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  if (!sections.empty() && !file.read(eh.e_shoff, sections.data(), sections.size() * sizeof(Elf64_Shdr)))
    return std::nullopt;
  ProgramAllocator found;
  bool defines_malloc = false;
  // The first dynamic section and dynamic symbol table only (a linked
  // file has one of each): a crafted file of 65,535 sections that all name
  // one 64 MiB string table would otherwise be read 65,535 times.
  bool seen_dynamic = false, seen_dynsym = false;
  for (const Elf64_Shdr& s : sections) {
    if ((s.sh_type != SHT_DYNAMIC && s.sh_type != SHT_DYNSYM) || s.sh_link >= sections.size()) continue;
    bool& seen = s.sh_type == SHT_DYNAMIC ? seen_dynamic : seen_dynsym;
    if (seen) continue;
    seen = true;
    std::string body, strtab;
    if (!file.section(s, body) || !file.section(sections[s.sh_link], strtab)) continue;
    if (s.sh_type == SHT_DYNAMIC) {
      for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= body.size(); off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        std::memcpy(&d, body.data() + off, sizeof d);
        if (d.d_tag == DT_NULL) break;
        if (d.d_tag != DT_NEEDED) continue;
        const std::string soname = string_at(strtab, d.d_un.d_val);
        if (const std::string name = allocator_of(soname); !name.empty() && found.name.empty()) {
          found.name = name;
          found.library = soname;
        }
      }
    } else {
      for (uint64_t off = sizeof(Elf64_Sym); off + sizeof(Elf64_Sym) <= body.size(); off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        std::memcpy(&sym, body.data() + off, sizeof sym);
        const std::string name = string_at(strtab, sym.st_name);
        if (name == "malloc" && sym.st_shndx != SHN_UNDEF && ELF64_ST_TYPE(sym.st_info) == STT_FUNC)
          defines_malloc = true;
        else if (sym.st_shndx == SHN_UNDEF && own_function(name))
          found.own_api.push_back(name);
      }
    }
  }
  std::sort(found.own_api.begin(), found.own_api.end());
  found.own_api.erase(std::unique(found.own_api.begin(), found.own_api.end()), found.own_api.end());
  static const char* state_only[] = {
      "mallctl",    "mallctlnametomib",    "mallctlbymib",    "malloc_stats_print",    "nallocx",
      "je_mallctl", "je_mallctlnametomib", "je_mallctlbymib", "je_malloc_stats_print", "je_nallocx"};
  for (const std::string& f : found.own_api)
    if (std::find(std::begin(state_only), std::end(state_only), f) == std::end(state_only))
      found.block_api.push_back(f);
  if (found.name.empty() && defines_malloc) found.name = "its own malloc";
  if (found.name.empty()) return std::nullopt;
  return found;
}

}  // namespace heaplab::allocators
