// Runs the ELF reader's fuzz target (linked_fuzz.cpp) over a small
// synthetic executable (a DT_NEEDED of libjemalloc.so.2, malloc defined,
// mallocx and mallctl imported), real ones, and deterministic mutations of
// their headers, in every build (the sanitizer build included).
// HEAPLAB_FUZZ_SEED_DIR=DIR writes the synthetic seed there, as a libFuzzer
// corpus (real executables pass libFuzzer's -max_len).
#include <elf.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "allocators/linked.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heaplab::allocators {
namespace {

// An ELF file with section headers only: null, .dynstr, .dynamic, .dynsym.
std::string synthetic_elf() {
  const std::string dynstr = std::string("\0libjemalloc.so.2\0libc.so.6\0malloc\0mallocx\0mallctl\0", 51);
  std::vector<Elf64_Dyn> dynamic = {{DT_NEEDED, {1}}, {DT_NEEDED, {18}}, {DT_NULL, {0}}};
  std::vector<Elf64_Sym> syms(4);
  std::memset(syms.data(), 0, syms.size() * sizeof(Elf64_Sym));
  syms[1].st_name = 28;  // malloc, defined
  syms[1].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  syms[1].st_shndx = 1;
  syms[2].st_name = 35;  // mallocx, imported
  syms[2].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  syms[3].st_name = 43;  // mallctl, imported
  syms[3].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
  std::string out(sizeof(Elf64_Ehdr), '\0');
  auto put = [&](const void* p, size_t n) {
    const uint64_t at = out.size();
    out.append(static_cast<const char*>(p), n);
    return at;
  };
  const uint64_t str_at = put(dynstr.data(), dynstr.size());
  const uint64_t dyn_at = put(dynamic.data(), dynamic.size() * sizeof(Elf64_Dyn));
  const uint64_t sym_at = put(syms.data(), syms.size() * sizeof(Elf64_Sym));
  Elf64_Shdr sh[4];
  std::memset(sh, 0, sizeof sh);
  sh[1].sh_type = SHT_STRTAB;
  sh[1].sh_offset = str_at;
  sh[1].sh_size = dynstr.size();
  sh[2].sh_type = SHT_DYNAMIC;
  sh[2].sh_offset = dyn_at;
  sh[2].sh_size = dynamic.size() * sizeof(Elf64_Dyn);
  sh[2].sh_link = 1;
  sh[3].sh_type = SHT_DYNSYM;
  sh[3].sh_offset = sym_at;
  sh[3].sh_size = syms.size() * sizeof(Elf64_Sym);
  sh[3].sh_link = 1;
  const uint64_t sh_at = put(sh, sizeof sh);
  Elf64_Ehdr eh;
  std::memset(&eh, 0, sizeof eh);
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_EXEC;
  eh.e_machine = EM_X86_64;
  eh.e_version = EV_CURRENT;
  eh.e_ehsize = sizeof eh;
  eh.e_shoff = sh_at;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = 4;
  std::memcpy(out.data(), &eh, sizeof eh);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

void run(const std::string& bytes) {
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

// The seed is read as it was made: the target reaches every branch.
TEST(LinkedFuzz, SyntheticSeedIsRead) {
  const std::string elf = synthetic_elf();
  const std::string path = testing::TempDir() + "/synthetic.elf";
  std::ofstream(path, std::ios::binary) << elf;
  const auto a = program_allocator(path);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->name, "jemalloc");
  EXPECT_EQ(a->library, "libjemalloc.so.2");
  EXPECT_EQ(a->own_api, (std::vector<std::string>{"mallctl", "mallocx"}));
  EXPECT_EQ(a->block_api, std::vector<std::string>{"mallocx"});
  run(elf);
  if (const char* dir = std::getenv("HEAPLAB_FUZZ_SEED_DIR"))
    std::ofstream(std::string(dir) + "/synthetic.elf", std::ios::binary) << elf;
}

// Mutations where a reader goes wrong: the header's section table (offset,
// count, entry size), each section's type, offset, size and link, set to
// edge values or random ones, and random bytes anywhere; then cut short.
TEST(LinkedFuzz, SeedsAndMutations) {
  std::vector<std::string> seeds = {synthetic_elf()};
  for (const char* path : {VICTIM_C, HEAPLAB_GLIBC_FORWARD}) {
    seeds.push_back(read_file(path));
    ASSERT_GT(seeds.back().size(), sizeof(Elf64_Ehdr)) << path;
  }
  std::mt19937_64 rng(20261127);
  const uint64_t edges[] = {0, 1, 7, 8, 63, 64, 0x7fffffff, 0xffffffff, 0x100000000ull, ~0ull >> 1, ~0ull};
  auto edge_or_random = [&] { return rng() % 3 ? edges[rng() % std::size(edges)] : rng(); };
  uint64_t runs = 0;
  for (const std::string& seed : seeds) {
    run(seed);
    Elf64_Ehdr eh;
    std::memcpy(&eh, seed.data(), sizeof eh);
    for (int i = 0; i < 600; ++i) {
      std::string m = seed;
      Elf64_Ehdr h = eh;
      switch (rng() % 5) {
        case 0:
          h.e_shoff = edge_or_random();
          break;
        case 1:
          h.e_shnum = uint16_t(rng() % 3 ? edges[rng() % std::size(edges)] : rng());
          break;
        case 2:
          h.e_shentsize = uint16_t(rng() % 2 ? sizeof(Elf64_Shdr) + 1 : rng());
          break;
        default:
          break;
      }
      std::memcpy(m.data(), &h, sizeof h);
      if (eh.e_shoff < m.size() && eh.e_shnum) {
        for (int k = 0; k < 3; ++k) {
          const uint64_t at = eh.e_shoff + (rng() % eh.e_shnum) * sizeof(Elf64_Shdr);
          if (at + sizeof(Elf64_Shdr) > m.size()) continue;
          Elf64_Shdr s;
          std::memcpy(&s, m.data() + at, sizeof s);
          switch (rng() % 5) {
            case 0:
              s.sh_type = rng() % 2 ? SHT_DYNAMIC : SHT_DYNSYM;
              break;
            case 1:
              s.sh_offset = edge_or_random();
              break;
            case 2:
              s.sh_size = edge_or_random();
              break;
            case 3:
              s.sh_link = uint32_t(edge_or_random());
              break;
            default:
              s.sh_link = uint32_t(rng() % eh.e_shnum);
              break;
          }
          std::memcpy(m.data() + at, &s, sizeof s);
        }
      }
      for (int k = int(rng() % 4); k > 0; --k) m[rng() % m.size()] = char(rng());
      if (rng() % 8 == 0) m.resize(rng() % m.size());
      run(m);
      ++runs;
    }
  }
  EXPECT_EQ(runs, 600u * seeds.size());
}

}  // namespace
}  // namespace heaplab::allocators
