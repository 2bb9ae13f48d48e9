// For end-to-end tests of the heaplab command: run it (through the shell,
// with an environment prefix), and collect its exit status, standard
// output and standard error apart.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace heaplab::testutil {

struct Outcome {
  int code = -1;
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs `env ARGS...` through the shell, stdout and stderr apart.
inline Outcome run(const std::vector<std::string>& args, const std::string& env = "") {
  static int n = 0;
  namespace fs = std::filesystem;
  const std::string err =
      (fs::temp_directory_path() / ("heaplab_test." + std::to_string(getpid()) + "." + std::to_string(n++) + ".err"))
          .string();
  std::string cmd = env.empty() ? "" : env + " ";
  for (const auto& a : args) cmd += quote(a) + " ";
  cmd += "2>" + quote(err);
  Outcome r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (size_t k; (k = fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, k);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  r.err = slurp(err);
  fs::remove(err);
  return r;
}

}  // namespace heaplab::testutil
