#include "replay/environment.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace heaplab::replay {

namespace {

std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// "always [madvise] never" -> "madvise"
std::string bracketed(const std::string& s) {
  const size_t a = s.find('['), b = s.find(']');
  return a != std::string::npos && b != std::string::npos && b > a ? s.substr(a + 1, b - a - 1) : s;
}

std::string cpuinfo_field(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}

}  // namespace

nlohmann::json environment_json() {
  nlohmann::json j;
  j["cpu_model"] = cpuinfo_field("model name");
  j["cpus_online"] = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) j["cpus_allowed"] = CPU_COUNT(&set);
  utsname u{};
  if (uname(&u) == 0) {
    j["kernel"] = std::string(u.sysname) + " " + u.release + " " + u.version;
    j["machine"] = u.machine;
    j["host"] = u.nodename;
  }
  j["thp_enabled"] = bracketed(first_line("/sys/kernel/mm/transparent_hugepage/enabled"));
  j["thp_defrag"] = bracketed(first_line("/sys/kernel/mm/transparent_hugepage/defrag"));
  j["page_size"] = sysconf(_SC_PAGESIZE);
  return j;
}

}  // namespace heaplab::replay
