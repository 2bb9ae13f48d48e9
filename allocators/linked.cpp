#include "allocators/linked.h"

#include <elf.h>

#include <algorithm>
#include <cstring>
#include <fstream>
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

template <class T>
bool read_at(const std::string& file, uint64_t off, T& out) {
  if (off > file.size() || file.size() - off < sizeof(T)) return false;
  std::memcpy(&out, file.data() + off, sizeof(T));
  return true;
}

std::string string_at(const std::string& file, const Elf64_Shdr& strtab, uint64_t index) {
  if (index >= strtab.sh_size || strtab.sh_offset > file.size() || strtab.sh_size > file.size() - strtab.sh_offset)
    return "";
  const char* p = file.data() + strtab.sh_offset + index;
  return std::string(p, strnlen(p, strtab.sh_size - index));
}

}  // namespace

std::optional<ProgramAllocator> program_allocator(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Elf64_Ehdr eh;
  if (!read_at(file, 0, eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr))
    return std::nullopt;
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  for (size_t i = 0; i < sections.size(); ++i)
    if (!read_at(file, eh.e_shoff + i * sizeof(Elf64_Shdr), sections[i])) return std::nullopt;
  const auto linked = [&](const Elf64_Shdr& s) -> const Elf64_Shdr* {
    return s.sh_link < sections.size() ? &sections[s.sh_link] : nullptr;
  };
  ProgramAllocator found;
  bool defines_malloc = false;
  for (const Elf64_Shdr& s : sections) {
    const Elf64_Shdr* strtab = linked(s);
    if (!strtab) continue;
    if (s.sh_type == SHT_DYNAMIC) {
      for (uint64_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
        Elf64_Dyn d;
        if (!read_at(file, s.sh_offset + off, d) || d.d_tag == DT_NULL) break;
        if (d.d_tag != DT_NEEDED) continue;
        const std::string soname = string_at(file, *strtab, d.d_un.d_val);
        if (const std::string name = allocator_of(soname); !name.empty() && found.name.empty()) {
          found.name = name;
          found.library = soname;
        }
      }
    } else if (s.sh_type == SHT_DYNSYM) {
      for (uint64_t off = sizeof(Elf64_Sym); off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
        Elf64_Sym sym;
        if (!read_at(file, s.sh_offset + off, sym)) break;
        const std::string name = string_at(file, *strtab, sym.st_name);
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
