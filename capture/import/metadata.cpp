#include "capture/import/metadata.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <ctime>

#include "capture/format/trace_format.h"

namespace heaplab::import {

const char* tool_version() { return HEAPLAB_VERSION; }

nlohmann::json base_metadata(const std::string& method, const std::string& clock,
                             const std::vector<std::string>& command_line) {
  nlohmann::json m;
  m["format"] = "heaplab-trace";
  m["format_version"] = std::to_string(trace::kFormatMajor) + "." + std::to_string(trace::kFormatMinor);
  m["tool"] = "heaplab";
  m["tool_version"] = tool_version();
  char when[32];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  m["created"] = when;
  struct utsname u {};
  if (uname(&u) == 0) {
    m["host"] = {{"name", u.nodename}, {"kernel", std::string(u.sysname) + " " + u.release}, {"arch", u.machine}};
  }
  m["capture"] = {{"method", method}};
  m["clock"] = clock;
  m["command_line"] = command_line;
  return m;
}

}  // namespace heaplab::import
