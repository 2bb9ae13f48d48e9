#include "common/files.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <system_error>

namespace heaplab::common {

void write_then_rename(const std::string& output, const std::function<void(const std::string& tmp)>& write) {
  const std::string tmp = output + ".heaplab-" + std::to_string(::getpid()) + ".part";
  try {
    write(tmp);
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, output, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw std::runtime_error(output + ": cannot create: " + ec.message());
  }
}

void write_text(const std::string& output, const std::string& text) {
  write_then_rename(output, [&](const std::string& tmp) {
    FILE* f = std::fopen(tmp.c_str(), "w");
    const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if ((f && std::fclose(f) != 0) || !ok) throw std::runtime_error("cannot write '" + output + "'");
  });
}

std::string self_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace heaplab::common
