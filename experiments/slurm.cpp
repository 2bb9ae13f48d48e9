#include "experiments/slurm.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "common/files.h"
#include "common/process.h"
#include "experiments/store.h"

namespace heaplab::experiments {

namespace fs = std::filesystem;

namespace {

// A word for the shell, single-quoted.
std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string job_name(const std::string& experiment) {
  std::string n = "heaplab-";
  for (char c : experiment) n += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  return n;
}

// Text for a comment line: printable ASCII only.
std::string printable(const std::string& s) {
  std::string o;
  for (char c : s) o += c >= 0x20 && c < 0x7f ? c : '?';
  return o;
}

// A path in an #SBATCH --output: Slurm expands %-patterns there; %% is a %.
std::string slurm_pattern(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '%' ? std::string("%%") : std::string(1, c);
  return o;
}

// sbatch --parsable prints "JOBID" or "JOBID;CLUSTER".
std::string job_id(const std::string& out) {
  std::string id = out.substr(0, out.find_first_of(";\n"));
  while (!id.empty() && (id.back() == ' ' || id.back() == '\r')) id.pop_back();
  return id;
}

}  // namespace

std::string shard_script(const SlurmOptions& opt, const std::string& heaplab, const std::string& session,
                         const std::string& dir, const std::string& cwd, const std::string& experiment_name) {
  const std::string file = fs::absolute(opt.experiment_file).string();
  return fmt::format(
      "#!/bin/bash\n"
      "# heaplab: shard $SLURM_ARRAY_TASK_ID of {n} of experiment {exp}, session {session}\n"
      "#SBATCH --job-name={name}\n"
      "#SBATCH --array=1-{n}\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --output={log}\n"
      "#SBATCH --chdir={cwd}\n"
      "{heaplab} run {file} --shard \"$SLURM_ARRAY_TASK_ID/{n}\" --session {qsession} --results "
      "{dir}/shard-\"$SLURM_ARRAY_TASK_ID\" -q\n"
      "status=$?\n"
      "echo $status > {dir}/shard-\"$SLURM_ARRAY_TASK_ID\".status\n"
      "exit $status\n",
      fmt::arg("n", opt.shards), fmt::arg("exp", printable(experiment_name)), fmt::arg("session", printable(session)),
      fmt::arg("name", job_name(experiment_name)), fmt::arg("log", slurm_pattern(dir) + "/shard-%a.log"),
      fmt::arg("cwd", cwd), fmt::arg("heaplab", quote(heaplab)), fmt::arg("file", quote(file)),
      fmt::arg("qsession", quote(session)), fmt::arg("dir", quote(dir)));
}

std::string merge_script(const SlurmOptions& opt, const std::string& heaplab, const std::string& session,
                         const std::string& dir, const std::string& cwd, const std::string& experiment_name) {
  const std::string results = fs::absolute(opt.results_dir).string();
  return fmt::format(
      "#!/bin/bash\n"
      "# heaplab: the shards of session {session} joined into {results}/heaplab.db, then its report\n"
      "#SBATCH --job-name={name}-merge\n"
      "#SBATCH --ntasks=1\n"
      "#SBATCH --output={log}\n"
      "#SBATCH --chdir={cwd}\n"
      "# Exit 0 only when every shard ran all its runs faithfully (heaplab run's 0).\n"
      "stores=()\n"
      "failed=0\n"
      "for k in $(seq 1 {n}); do\n"
      "  status=$(cat {dir}/shard-$k.status 2>/dev/null || echo none)\n"
      "  if [ \"$status\" != 0 ]; then\n"
      "    failed=1\n"
      "    echo \"heaplab: shard $k of {n} ended with exit $status (its log: {dir}/shard-$k.log)\" >&2\n"
      "  fi\n"
      "  if [ -f {dir}/shard-$k/heaplab.db ]; then stores+=({dir}/shard-$k/heaplab.db); fi\n"
      "done\n"
      "[ ${{#stores[@]}} -gt 0 ] || exit 1\n"
      "{heaplab} results merge \"${{stores[@]}}\" --results {qresults} || exit 2\n"
      "{heaplab} report --results {qresults} --session {qsession} || exit 2\n"
      "exit $failed\n",
      fmt::arg("session", printable(session)), fmt::arg("results", printable(results)),
      fmt::arg("name", job_name(experiment_name)), fmt::arg("log", slurm_pattern(dir) + "/merge.log"),
      fmt::arg("cwd", cwd), fmt::arg("n", opt.shards), fmt::arg("dir", quote(dir)), fmt::arg("heaplab", quote(heaplab)),
      fmt::arg("qresults", quote(results)), fmt::arg("qsession", quote(session)));
}

SlurmSubmission submit_slurm(const ExperimentSpec& spec, const SlurmOptions& opt) {
  if (opt.shards < 1) throw SlurmError("--slurm: the number of shards must be at least 1");
  for (const TraceSpec& t : spec.traces)
    if (!t.capture.empty())
      throw SpecError(spec.path + ": trace '" + t.name +
                      "': --slurm needs trace files (each shard would capture its own run of the program); capture "
                      "it once with heaplab capture and give 'file'");
  for (const TraceSpec& t : spec.traces)
    if (access(t.file.c_str(), R_OK) != 0)
      throw SpecError(spec.path + ": trace '" + t.name + "': " + t.file + ": " + std::strerror(errno));
  SlurmSubmission sub;
  sub.session = opt.session.empty() ? spec.name + "-" + utc_now_iso() + "-slurm" : opt.session;
  // The id names a directory and goes into the batch scripts.
  for (char c : sub.session)
    if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("._:+-", c))
      throw SlurmError("--slurm: session id '" + printable(sub.session) +
                       "': letters, digits and . _ : + - only (it names the jobs' directory)" +
                       (opt.session.empty() ? "; give one with --session" : ""));
  sub.dir = (fs::absolute(opt.results_dir) / "slurm" / sub.session).string();
  std::error_code ec;
  if (fs::exists(sub.dir, ec))
    throw SlurmError(sub.dir + " exists: session '" + sub.session + "' was submitted before (give another --session)");
  fs::create_directories(sub.dir, ec);
  if (ec) throw SlurmError(sub.dir + ": cannot create it: " + ec.message());
  const std::string heaplab = common::self_dir() + "/heaplab";
  const std::string cwd = fs::current_path().string();
  // #SBATCH lines are not read by a shell: their paths cannot be quoted.
  for (const std::string* p : {static_cast<const std::string*>(&sub.dir), &cwd})
    if (p->find_first_of(" \t\n\"'") != std::string::npos) {
      fs::remove(sub.dir, ec);
      throw SlurmError("--slurm: '" + *p + "' has a space or quote, which #SBATCH lines cannot hold; run from (and " +
                       "into) a path without");
    }
  const std::string shards = sub.dir + "/shards.sbatch", merge = sub.dir + "/merge.sbatch";
  common::write_text(shards, shard_script(opt, heaplab, sub.session, sub.dir, cwd, spec.name));
  common::write_text(merge, merge_script(opt, heaplab, sub.session, sub.dir, cwd, spec.name));
  chmod(shards.c_str(), 0755);
  chmod(merge.c_str(), 0755);

  const auto sbatch = [&](std::vector<std::string> args, const std::string& script) {
    process::Spec p;
    p.argv = {opt.sbatch, "--parsable"};
    p.argv.insert(p.argv.end(), opt.sbatch_args.begin(), opt.sbatch_args.end());
    p.argv.insert(p.argv.end(), args.begin(), args.end());
    p.argv.push_back(script);
    p.search_path = true;
    p.out = p.err = process::Stdio::pipe;
    process::Output o;
    try {
      o = process::run(p);
    } catch (const process::SpawnError& e) {
      throw SlurmError(e.exec_failed() ? "--slurm: cannot run '" + opt.sbatch + "': " + std::strerror(e.err()) +
                                             " (Slurm's client commands: apt-get install slurm-client)"
                                       : std::string("--slurm: ") + e.what());
    }
    return o;
  };
  process::Output a = sbatch({}, shards);
  if (!process::succeeded(a.status) || job_id(a.out).empty()) {
    std::string why = a.err.substr(0, a.err.find('\n'));
    throw SlurmError("--slurm: sbatch refused the job array (" + process::describe_status(a.status) +
                     (why.empty() ? "" : ": " + why) + "); the scripts are in " + sub.dir);
  }
  sub.array_job = job_id(a.out);
  std::vector<std::string> margs = {"--dependency=afterany:" + sub.array_job, "--kill-on-invalid-dep=yes"};
  if (opt.wait) margs.push_back("--wait");
  process::Output m = sbatch(margs, merge);
  sub.merge_job = job_id(m.out);
  if (sub.merge_job.empty())
    throw SlurmError("--slurm: sbatch refused the merge job (" + process::describe_status(m.status) + ": " +
                     m.err.substr(0, m.err.find('\n')) + "); the job array " + sub.array_job + " was submitted; " +
                     "merge its shards with heaplab results merge " + sub.dir + "/shard-*/heaplab.db");
  if (opt.wait) {
    sub.merge_exit = process::exit_code(m.status);
    std::ifstream log(sub.dir + "/merge.log");
    sub.report.assign(std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>());
  }
  return sub;
}

}  // namespace heaplab::experiments
