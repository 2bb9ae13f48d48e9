#include "capture/pt/pt_import.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <stdexcept>
#include <unordered_map>

#include "capture/pt/ptw_assembler.h"
#include "capture/shim/raw_format.h"
#include "capture/format/memory_available.h"
#include "common/process.h"

namespace heaplab::pt {

const char* decoder_name(Decoder d) {
  switch (d) {
    case Decoder::direct:
      return "direct";
    case Decoder::dlfilter:
      return "dlfilter";
    case Decoder::text:
      return "text";
  }
  return "?";
}

bool parse_decoder(const std::string& s, Decoder* d) {
  for (Decoder x : {Decoder::direct, Decoder::dlfilter, Decoder::text})
    if (s == decoder_name(x)) {
      *d = x;
      return true;
    }
  return false;
}

namespace {

struct Ev {  // a decoded event, compact (per-cpu buffers: kept to be put in order)
  uint64_t tsc, a, b, c;
  uint32_t seq;
  uint32_t op;
};

// Which thread ran on a CPU at a perf time (per-cpu buffers).
class CpuThreads {
 public:
  explicit CpuThreads(const PerfData& d) {
    for (const SwitchRecord& s : d.switches) by_cpu_[s.cpu].push_back(s);
    for (auto& [cpu, v] : by_cpu_)
      std::stable_sort(v.begin(), v.end(),
                       [](const SwitchRecord& x, const SwitchRecord& y) { return x.time < y.time; });
  }
  // False if no thread of the recording ran there then.
  bool at(uint32_t cpu, uint64_t time, uint32_t* pid, uint32_t* tid) const {
    auto it = by_cpu_.find(cpu);
    if (it == by_cpu_.end()) return false;
    const auto& v = it->second;
    auto p = std::upper_bound(v.begin(), v.end(), time, [](uint64_t t, const SwitchRecord& s) { return t < s.time; });
    if (p == v.begin()) return false;
    --p;
    // After a switch-out the thread is gone, but an event stamped in the
    // few cycles before it was written still belongs to it.
    *pid = p->pid;
    *tid = p->tid;
    return true;
  }

 private:
  std::map<uint32_t, std::vector<SwitchRecord>> by_cpu_;
};

// Where decoded events go: per process, a raw capture's .blocks file
// (DIR/PID.0.hlraw.blocks), written a 64 KiB block per thread at a time, so
// memory stays a block per thread however long the recording. The
// header file is written at the end, for the process that is kept.
struct Process {
  uint32_t pid = 0;
  int fd = -1;
  std::string blocks_path;
  uint32_t threads = 0;  // slots handed out
  uint64_t blocks = 0;
  uint64_t events = 0, lost = 0, duplicates = 0, misattributed = 0;
  uint64_t first_time = ~uint64_t{0};
};

struct Thread {
  uint32_t pid = 0, tid = 0;
  Process* proc = nullptr;
  uint32_t slot = 0;
  PtwAssembler assembler;  // word routes: this thread's payloads in order
  std::vector<Ev> held;    // per-cpu buffers: events until all CPUs are decoded
  std::vector<uint8_t> block;
  uint64_t in_block = 0, block_seq = 0;
  uint32_t next_seq = 0;  // the shim numbers a thread's events from 0
  struct Held {
    Ev e;
    uint32_t age;  // events of this thread that arrived later but come before it
  };
  std::vector<Held> window;  // sorted by sequence number
};

class Collector {
 public:
  // `cpus`: per-cpu buffers (else nullptr). A thread's events then arrive
  // CPU by CPU: they are held, and put in order at the end; otherwise each
  // thread's events arrive in order and go straight to its blocks.
  Collector(const std::string& dir, const TimeConv& time, const std::unordered_map<uint32_t, std::string>& names,
            const CpuThreads* cpus)
      : dir_(dir), time_(time), names_(names), hold_(cpus != nullptr), cpus_(cpus) {}
  ~Collector() {  // the block files of every process but the one kept (none if decoding failed)
    for (auto& [pid, p] : procs_) {
      if (p.fd >= 0) ::close(p.fd);
      if (!kept_ || pid != kept_pid_) ::unlink(p.blocks_path.c_str());
    }
  }
  void keep(uint32_t pid) {
    kept_ = true;
    kept_pid_ = pid;
  }
  Thread& thread(uint32_t pid, uint32_t tid) {
    const uint64_t key = uint64_t(pid) << 32 | tid;
    auto it = index_.find(key);
    if (it != index_.end()) return threads_[it->second];
    Process& p = procs_[pid];
    if (p.fd < 0) {
      p.pid = pid;
      p.blocks_path = dir_ + "/" + std::to_string(pid) + ".0.hlraw.blocks";
      p.fd = ::open(p.blocks_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (p.fd < 0) throw std::runtime_error(p.blocks_path + ": " + std::strerror(errno));
    }
    index_.emplace(key, threads_.size());
    threads_.emplace_back();
    Thread& t = threads_.back();
    t.pid = pid;
    t.tid = tid;
    t.proc = &p;
    t.slot = p.threads++;
    return t;
  }
  // A payload of the perf script routes. On per-cpu buffers perf's thread
  // for it is only as good as its PT timing (PSB+ TSC, no MTC in heaplab's
  // recordings), so payloads are assembled per CPU and each event goes to
  // its thread by its own TSC, as in the direct route.
  void word(uint32_t pid, uint32_t tid, int32_t cpu, uint64_t w) {
    ++words_;
    if (cpus_ && cpu >= 0) {
      cpu_asm_[uint32_t(cpu)].word(w, [&](const PtwEvent& e) { event_on_cpu(uint32_t(cpu), e); });
      return;
    }
    Thread& t = last_ && last_->pid == pid && last_->tid == tid ? *last_ : thread(pid, tid);
    t.assembler.word(w, [&](const PtwEvent& e) { put(t, Ev{e.tsc, e.a, e.b, e.c, e.seq, e.op}); });
    last_ = &t;
  }
  // Losses seen by the word routes' assemblers (per thread or per CPU).
  PtwLosses word_losses() const {
    PtwLosses l;
    const auto add = [&](const PtwAssembler& a) {
      l.cut += a.losses().cut;
      l.stray += a.losses().stray;
    };
    for (const Thread& t : threads_) add(t.assembler);
    for (const auto& [cpu, a] : cpu_asm_) add(a);
    return l;
  }
  uint64_t unattributed() const { return unattributed_; }
  void event(uint32_t pid, uint32_t tid, const PtwEvent& e) {
    Thread& t = last_ && last_->pid == pid && last_->tid == tid ? *last_ : thread(pid, tid);
    put(t, Ev{e.tsc, e.a, e.b, e.c, e.seq, e.op});
    last_ = &t;
  }
  // An event of a per-cpu buffer: to the thread the context-switch sideband
  // says ran on that CPU at the event's own TSC.
  void event_on_cpu(uint32_t cpu, const PtwEvent& e) {
    uint32_t pid, tid;
    if (cpus_->at(cpu, time_.to_perf(e.tsc), &pid, &tid))
      event(pid, tid, e);
    else
      ++unattributed_;
  }
  // Writes what is held (in time order) and every thread's last block.
  void finish() {
    for (Thread& t : threads_) {
      if (!t.held.empty()) {
        std::stable_sort(t.held.begin(), t.held.end(), [](const Ev& x, const Ev& y) { return x.tsc < y.tsc; });
        for (const Ev& e : t.held) write_event(t, e);
        std::vector<Ev>().swap(t.held);
      }
      drain(t);
      if (t.in_block) flush(t);
    }
  }
  std::deque<Thread>& threads() { return threads_; }
  std::map<uint32_t, Process>& processes() { return procs_; }
  uint64_t words() const { return words_; }

 private:
  void put(Thread& t, const Ev& e) {
    if (hold_) {
      check_held(++held_);
      t.held.push_back(e);
    } else {
      write_event(t, e);
    }
  }
  // Per-cpu events are held until every CPU is decoded (sizeof(Ev) bytes
  // each): from 2^16 on, each doubling is checked against the memory
  // available first.
  static constexpr uint64_t kHeldCheckedFrom = uint64_t{1} << 16;
  static void check_held(uint64_t held) {
    if (const auto s = trace::doubling_short_of_memory(held, kHeldCheckedFrom, sizeof(Ev)))
      throw std::runtime_error(
          "per-CPU PT buffers: " + std::to_string(held) + " events held so far to be put in order (" +
          std::to_string(sizeof(Ev)) + " bytes each until every CPU is decoded); twice that needs about " +
          std::to_string(s->need >> 20) + " MiB, more than the " + std::to_string(s->available >> 20) +
          " MiB this machine has available: record per thread (perf record --per-thread)");
  }
  // A thread's events go through a small window ordered by sequence
  // number before they are written, so that
  // - an event that came out of order (a signal handler that allocated
  //   between the shim numbering an event and writing it) finds its place;
  // - an event written twice (overlapping AUX data) is kept once;
  // - an event that is not this thread's (per-cpu buffers: preempted and
  //   moved to another CPU between its rdtsc and its ptwrites, so its TSC
  //   points at the thread that ran there) is recognised when many of the
  //   thread's own events keep arriving ahead of it, and dropped (counted;
  //   its own thread shows the gap) instead of moving the numbering;
  // - a gap in the numbers is written as a `lost` record with the count.
  static constexpr size_t kWindow = 16;
  static constexpr uint32_t kForeignAge = 64;
  void write_event(Thread& t, const Ev& e) {
    const int32_t d = int32_t(e.seq - t.next_seq);
    if (d == 0 && t.window.empty()) {  // in order: the usual case
      emit(t, e);
      return;
    }
    if (d < 0) {  // behind what was written: decoded twice, or not this thread's
      ++t.proc->duplicates;
      return;
    }
    auto pos = t.window.begin();
    while (pos != t.window.end() && int32_t(pos->e.seq - t.next_seq) < d) ++pos;
    if (pos != t.window.end() && pos->e.seq == e.seq) {
      ++t.proc->duplicates;
      return;
    }
    for (auto it = pos; it != t.window.end(); ++it) ++it->age;
    t.window.insert(pos, Thread::Held{e, 0});
    for (auto it = t.window.begin(); it != t.window.end();)
      if (it->age > kForeignAge) {
        ++t.proc->misattributed;
        it = t.window.erase(it);
      } else {
        ++it;
      }
    // Out: what continues the numbering, and the oldest beyond the window
    // (the events between were lost).
    size_t out = 0;
    while (out < t.window.size() && (t.window[out].e.seq == t.next_seq || t.window.size() - out > kWindow)) {
      emit(t, t.window[out].e);
      ++out;
    }
    t.window.erase(t.window.begin(), t.window.begin() + long(out));
  }
  void drain(Thread& t) {
    for (const Thread::Held& h : t.window) emit(t, h.e);
    t.window.clear();
  }
  void emit(Thread& t, const Ev& e) {
    const uint64_t time = time_.to_perf(e.tsc);
    if (e.seq != t.next_seq) {  // a gap: events lost here
      const uint64_t lost = uint32_t(e.seq - t.next_seq);
      record(t, raw::kRawLost, time, lost, 0, 0);
      t.proc->lost += lost;
    }
    t.next_seq = e.seq + 1;
    record(t, e.op, time, e.a, e.b, e.c);
    ++t.proc->events;
    t.proc->first_time = std::min(t.proc->first_time, time);
  }
  void record(Thread& t, uint32_t op, uint64_t time, uint64_t a, uint64_t b, uint64_t c) {
    using namespace heaplab::raw;
    if (t.in_block == 0) {
      t.block.assign(kBlockSize, 0);
      BlockHeader bh{};
      bh.magic = kBlockMagic;
      bh.thread = t.slot;
      bh.thread_block_seq = t.block_seq;
      bh.tid = t.tid;
      bh.ticks = bh.mono_ns = time;
      auto n = names_.find(t.tid);
      if (n == names_.end()) n = names_.find(t.pid);
      if (n != names_.end())
        std::memcpy(bh.name, n->second.data(), std::min<size_t>(n->second.size(), sizeof bh.name - 1));
      std::memcpy(t.block.data(), &bh, sizeof bh);
    }
    const Record r{record_head(op, time), a, b, c};
    std::memcpy(t.block.data() + kBlockHeaderSize + t.in_block * kRecordSize, &r, sizeof r);
    if (++t.in_block == kRecordsPerBlock) flush(t);
  }
  void flush(Thread& t);

  std::string dir_;
  TimeConv time_;
  const std::unordered_map<uint32_t, std::string>& names_;
  bool hold_;
  uint64_t held_ = 0;           // events held (per-cpu buffers)
  std::deque<Thread> threads_;  // a deque: references stay valid as it grows
  std::unordered_map<uint64_t, size_t> index_;
  std::map<uint32_t, Process> procs_;
  Thread* last_ = nullptr;
  uint64_t words_ = 0;
  bool kept_ = false;
  uint32_t kept_pid_ = 0;
  const CpuThreads* cpus_;
  std::map<uint32_t, PtwAssembler> cpu_asm_;
  uint64_t unattributed_ = 0;
};

void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const auto* c = static_cast<const uint8_t*>(p);
  while (n) {
    const ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw std::runtime_error(path + ": " + std::strerror(w < 0 ? errno : ENOSPC));
    c += w;
    n -= size_t(w);
  }
}

void Collector::flush(Thread& t) {
  write_all(t.proc->fd, t.block.data(), t.block.size(), t.proc->blocks_path);
  ++t.proc->blocks;
  ++t.block_seq;
  t.in_block = 0;
}

// pid of each tid, from COMM and FORK records.
std::unordered_map<uint32_t, uint32_t> pids_of(const PerfData& d) {
  std::unordered_map<uint32_t, uint32_t> m;
  for (const TaskRecord& t : d.tasks)
    if (t.fork) m[t.tid] = t.pid;
  for (const CommRecord& c : d.comms) m[c.tid] = c.pid;
  return m;
}

// ---- direct ------------------------------------------------------------

void decode_direct(const PerfData& d, Collector& col, const std::unordered_map<uint32_t, uint32_t>& pids,
                   PtImportReport& rep) {
  // Chunks per buffer, in AUX offset order.
  std::map<uint32_t, std::vector<const AuxChunk*>> queues;
  for (const AuxChunk& c : d.chunks) queues[c.idx].push_back(&c);
  // AUX records flagged truncated, by the thread (per-thread) or CPU whose buffer they describe.
  std::vector<std::pair<uint64_t, uint64_t>> truncated;  // (owner, aux offset where data stops)
  for (const AuxRecord& a : d.aux) {
    ++rep.aux_truncated;
    truncated.emplace_back(d.per_cpu ? a.id.cpu : a.id.tid, a.aux_offset + a.aux_size);
  }
  std::vector<uint8_t> joined;  // a cut packet and the chunk it continues in
  for (auto& [idx, queue] : queues) {
    auto& chunks = queue;  // a plain reference: lambdas below capture it (clang 14 captures no structured binding)
    std::stable_sort(chunks.begin(), chunks.end(),
                     [](const AuxChunk* x, const AuxChunk* y) { return x->offset < y->offset; });
    const AuxChunk& first = *chunks.front();
    PtwAssembler assembler;
    const uint32_t qtid = first.tid;
    const int32_t qcpu = first.cpu;
    const uint32_t qpid = pids.count(qtid) ? pids.at(qtid) : qtid;
    const auto sink = [&](const PtwEvent& e) {
      if (d.per_cpu && qcpu >= 0)
        col.event_on_cpu(uint32_t(qcpu), e);
      else
        col.event(qpid, qtid, e);
    };
    const uint64_t owner_key = d.per_cpu ? uint64_t(uint32_t(qcpu)) : qtid;
    const auto stop_at = [&](uint64_t from, uint64_t to) {  // a truncation inside [from, to)?
      for (auto [owner, at] : truncated)
        if (owner == owner_key && at > from && at < to) return at;
      return to;
    };
    const auto truncated_at = [&](uint64_t at) {  // data stopped short right here
      for (auto [owner, t] : truncated)
        if (owner == owner_key && t == at) return true;
      return false;
    };
    // Contiguous runs of chunks decode as one stream; a gap in the offsets
    // (or a truncation) ends a run: the event it cuts is counted lost.
    // perf pads each AUXTRACE payload to 8 bytes and counts the padding in
    // its size, while the next one's offset continues from the unpadded
    // end: a next chunk that starts up to 7 bytes before this one's end
    // overlaps padding, which is dropped.
    const auto useful = [&](size_t k) {
      uint64_t n = chunks[k]->size;
      if (k + 1 < chunks.size() && chunks[k + 1]->offset < chunks[k]->offset + n &&
          chunks[k]->offset + n - chunks[k + 1]->offset < 8)
        n = chunks[k + 1]->offset - chunks[k]->offset;
      return n;
    };
    // Chunks decode one after the other in place; a gap in the offsets or
    // a truncation starts over in search of sync (the event it cut is
    // counted lost). Only a packet cut by a chunk boundary is copied, with
    // the next chunk, to decode it whole.
    bool synced = false;
    uint64_t expect = first.offset;
    std::vector<uint8_t> carry;  // the tail of the previous chunk (a cut packet)
    for (size_t k = 0; k < chunks.size(); ++k) {
      const AuxChunk& c = *chunks[k];
      uint64_t n = useful(k);
      const uint8_t* data = c.data;
      uint64_t from = c.offset;
      if (c.offset > expect) {  // data lost between the chunks
        ++rep.aux_gaps;
        assembler.lost();
        synced = false;
        carry.clear();
      } else if (k > 0 && c.offset == expect && truncated_at(expect)) {
        // The kernel's way: the offsets go on, an AUX record says the data
        // before stopped short here. What follows starts unsynced.
        assembler.lost();
        synced = false;
        carry.clear();
      } else if (c.offset < expect) {
        // Overlapping what was decoded (snapshot mode writes overlapping
        // buffers): the same AUX offsets are the same bytes; go on after them.
        const uint64_t skip = std::min(expect - c.offset, n);
        ++rep.aux_overlaps;
        data += skip;
        from += skip;
        n -= skip;
        if (n == 0) continue;
      }
      expect = from + n;
      if (!carry.empty()) {
        joined.assign(carry.begin(), carry.end());
        joined.insert(joined.end(), c.data, c.data + n);
        from -= carry.size();
        data = joined.data();
        n = joined.size();
        carry.clear();
      }
      const bool more = k + 1 < chunks.size() && chunks[k + 1]->offset == expect && !truncated_at(expect);
      // A truncation inside the chunk splits it.
      while (n) {
        const uint64_t cut = stop_at(from, from + n) - from;
        const bool split = cut < n;
        const StreamEnd e = decode_stream(data, cut, assembler, sink, rep.stream, synced, more && !split);
        synced = e.synced;
        if (split) {
          assembler.lost();
          synced = false;
        } else if (e.stopped < cut) {
          carry.assign(data + e.stopped, data + cut);
        }
        data += cut;
        n -= cut;
        from += cut;
      }
    }
    rep.cut += assembler.losses().cut;
    rep.stray_words += assembler.losses().stray;
    rep.short_words += assembler.losses().short_words;
  }
  rep.ptw_words = rep.stream.ptw;
}

// ---- perf script routes ----------------------------------------------

struct PerfRun {
  std::vector<std::string> args;
  std::string stdin_path;  // fed to perf's stdin (pipe-mode files)
  std::string stderr_path;
};

// Runs perf; `out` receives its stdout in pieces (nullptr: discarded).
template <class Out>
void run_perf(const PerfRun& r, Out&& out, bool want_stdout) {
  process::Spec spec;
  spec.argv = r.args;
  spec.search_path = true;
  // perf 6.1 mis-seeks in a pipe-mode file given as a file (-i FILE or a
  // redirected stdin): it gets the bytes through a real pipe, fed by a thread.
  spec.in = r.stdin_path.empty() ? process::Stdio::null : process::Stdio::pipe;
  spec.out = want_stdout ? process::Stdio::pipe : process::Stdio::null;
  spec.err = process::Stdio::file;
  spec.err_file = r.stderr_path;
  process::Child child;
  try {
    child = process::spawn(spec);
  } catch (const process::SpawnError& e) {
    if (e.exec_failed())
      throw std::runtime_error("cannot run " + r.args[0] + ": " + std::strerror(e.err()) +
                               " (the dlfilter and text decoders need perf: apt-get install linux-perf)");
    throw std::runtime_error(e.what());
  }
  std::thread feeder;
  if (!r.stdin_path.empty()) {
    feeder = std::thread([path = r.stdin_path, fd = child.release_stdin()]() {
      sigset_t pipe_sig;
      sigemptyset(&pipe_sig);
      sigaddset(&pipe_sig, SIGPIPE);
      pthread_sigmask(SIG_BLOCK, &pipe_sig, nullptr);  // perf may stop reading early: EPIPE, not a signal
      const int in = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      std::vector<char> buf(1 << 20);
      for (ssize_t n; in >= 0 && (n = read(in, buf.data(), buf.size())) > 0;) {
        ssize_t done = 0;
        while (done < n) {
          const ssize_t w = write(fd, buf.data() + done, size_t(n - done));
          if (w < 0 && errno == EINTR) continue;
          if (w <= 0) break;
          done += w;
        }
        if (done < n) break;
      }
      if (in >= 0) close(in);
      close(fd);
    });
  }
  // Whatever happens to the output (the consumer may throw: no room for the
  // raw blocks), perf is reaped and the feeder joined: killed first if the
  // output was not read to its end.
  struct Finish {
    process::Child& child;
    std::thread& feeder;
    int status = 0;
    bool done = false;
    void operator()(bool kill_it) {
      if (done) return;
      done = true;
      if (kill_it) child.kill(SIGKILL);
      status = child.wait();
      if (feeder.joinable()) feeder.join();
    }
    ~Finish() { (*this)(true); }
  } finish{child, feeder};
  if (want_stdout) {
    std::vector<char> buf(1 << 20);
    for (;;) {
      const ssize_t n = read(child.stdout_fd(), buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      out(buf.data(), size_t(n));
    }
  }
  finish(false);
  const int status = finish.status;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::ifstream f(r.stderr_path);
    std::string line, last;
    while (std::getline(f, line))
      if (!line.empty() && line.find("WARNING") == std::string::npos && line[0] != ' ') last = line;
    throw std::runtime_error(r.args[0] + " script failed (" +
                             (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                                : "signal " + std::to_string(WTERMSIG(status))) +
                             ")" + (last.empty() ? "" : ": " + last));
  }
}

PerfRun perf_script(const PerfData& d, const PtImportOptions& opt, const std::string& dir) {
  PerfRun r;
  r.args = {opt.perf, "script", "--force", "--itrace=w"};
  if (d.pipe_mode) {  // perf 6.1 must read pipe-mode files through a pipe
    r.args.insert(r.args.end(), {"-i", "-"});
    r.stdin_path = d.path;
  } else {
    r.args.insert(r.args.end(), {"-i", d.path});
  }
  r.stderr_path = dir + "/perf-script.stderr";
  return r;
}

void decode_dlfilter(const PerfData& d, const PtImportOptions& opt, const std::string& dir, Collector& col,
                     const std::unordered_map<uint32_t, uint32_t>& pids) {
  if (opt.dlfilter.empty() || access(opt.dlfilter.c_str(), R_OK) != 0)
    throw std::runtime_error("the dlfilter library " +
                             (opt.dlfilter.empty() ? std::string("(none given)") : opt.dlfilter) +
                             " is missing (it is built next to heaplab as libheaplab_ptw_dlfilter.so)");
  PerfRun r = perf_script(d, opt, dir);
  const std::string out = dir + "/ptwrite.bin";
  r.args.insert(r.args.end(), {"--dlfilter", opt.dlfilter, "--dlarg", out});
  run_perf(
      r, [](const char*, size_t) {}, false);
  {  // the filter cannot make perf fail: its own complaints are in perf's stderr
    std::ifstream e(r.stderr_path);
    for (std::string line; std::getline(e, line);)
      if (line.rfind("heaplab dlfilter:", 0) == 0) throw std::runtime_error(line);
  }
  std::ifstream f(out, std::ios::binary);
  if (!f) throw std::runtime_error(out + ": the dlfilter wrote no output");
  std::vector<char> buf(16 << 16);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const size_t n = size_t(f.gcount()) / 16 * 16;
    for (size_t k = 0; k < n; k += 16) {
      int32_t cpu;
      uint32_t tid;
      uint64_t w;
      std::memcpy(&cpu, buf.data() + k, 4);
      std::memcpy(&tid, buf.data() + k + 4, 4);
      std::memcpy(&w, buf.data() + k + 8, 8);
      auto p = pids.find(tid);
      col.word(p == pids.end() ? tid : p->second, tid, cpu, w);
    }
  }
  unlink(out.c_str());
}

// "  PID/TID [CPU]  IP: 0 payload: 0xHEX" per line (zero: "payload: 0").
class TextParser {
 public:
  explicit TextParser(Collector& c) : col_(c) {}
  void feed(const char* p, size_t n) {
    size_t start = 0;
    for (size_t k = 0; k < n; ++k) {
      if (p[k] != '\n') continue;
      if (!partial_.empty()) {
        partial_.append(p + start, k - start);
        line(partial_.data(), partial_.size());
        partial_.clear();
      } else {
        line(p + start, k - start);
      }
      start = k + 1;
    }
    partial_.append(p + start, n - start);
  }
  uint64_t unparsed() const { return unparsed_; }

 private:
  void line(const char* s, size_t n) {
    const char* e = s + n;
    while (s < e && *s == ' ') ++s;
    uint64_t pid = 0, tid = 0, w = 0;
    const char* q = s;
    while (q < e && *q >= '0' && *q <= '9') pid = pid * 10 + uint64_t(*q++ - '0');
    if (q == s || q >= e || *q != '/') return bad();
    const char* t = ++q;
    while (q < e && *q >= '0' && *q <= '9') tid = tid * 10 + uint64_t(*q++ - '0');
    if (q == t) return bad();
    while (q < e && *q == ' ') ++q;
    int64_t cpu = -1;  // "[001]"; "[-01]" or none for per-thread buffers
    if (q < e && *q == '[') {
      bool neg = ++q < e && *q == '-';
      if (neg) ++q;
      int64_t c = 0;
      while (q < e && *q >= '0' && *q <= '9') c = c * 10 + (*q++ - '0');
      cpu = neg ? -1 : c;
    }
    static constexpr char kKey[] = "payload: ";  // then 0xHEX, or 0 (perf prints zero as "0")
    const char* k = std::search(q, e, kKey, kKey + sizeof kKey - 1);
    if (k == e) return bad();
    k += sizeof kKey - 1;
    if (e - k >= 2 && k[0] == '0' && k[1] == 'x') k += 2;
    const char* h = k;
    for (; k < e; ++k) {
      const char c = *k;
      unsigned v;
      if (c >= '0' && c <= '9')
        v = unsigned(c - '0');
      else if (c >= 'a' && c <= 'f')
        v = unsigned(c - 'a' + 10);
      else
        break;
      w = w << 4 | v;
    }
    if (k == h) return bad();
    col_.word(uint32_t(pid), uint32_t(tid), int32_t(cpu), w);
  }
  void bad() { ++unparsed_; }
  Collector& col_;
  std::string partial_;
  uint64_t unparsed_ = 0;
};

// Returns the lines that were not ptwrite samples.
uint64_t decode_text(const PerfData& d, const PtImportOptions& opt, const std::string& dir, Collector& col) {
  PerfRun r = perf_script(d, opt, dir);
  // perf leaves the CPU out of per-thread recordings' samples (and refuses
  // to print it).
  r.args.insert(r.args.end(), {"-F", d.per_cpu ? "pid,tid,cpu,synth" : "pid,tid,synth"});
  TextParser p(col);
  run_perf(
      r, [&](const char* s, size_t n) { p.feed(s, n); }, true);
  return p.unparsed();
}

// ---- the raw file ------------------------------------------------------

struct Fd {
  int fd;
  explicit Fd(const std::string& path) : fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
    if (fd < 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  }
  ~Fd() { close(fd); }
};

}  // namespace

PtImportReport decode_perf_pt(const std::string& perf_data, const std::string& dir, const PtImportOptions& opt,
                              std::string* raw_path) {
  using namespace heaplab::raw;
  PtImportReport rep;
  rep.decoder = opt.decoder;
  const auto t0 = std::chrono::steady_clock::now();  // reading the file counts
  const PerfDataFile file(perf_data);
  const PerfData& d = file.data();
  if (!d.have_info) throw PerfDataError(perf_data + ": no Intel PT data in it (no AUXTRACE_INFO record)");
  rep.per_cpu = d.per_cpu;
  rep.pipe_mode = d.pipe_mode;
  rep.pt_bytes = d.pt_bytes;
  rep.file_truncated_at = file.truncated_at();
  rep.sideband_lost = d.lost_records;
  rep.auxtrace_errors = d.auxtrace_errors;
  std::unordered_map<uint32_t, std::string> names;  // by tid: the last COMM
  for (const CommRecord& c : d.comms) names[c.tid] = c.name;
  const auto pids = pids_of(d);
  const CpuThreads cpus(d);
  Collector col(dir, d.time, names, d.per_cpu ? &cpus : nullptr);
  switch (opt.decoder) {
    case Decoder::direct:
      decode_direct(d, col, pids, rep);
      break;
    case Decoder::dlfilter:
      decode_dlfilter(d, opt, dir, col, pids);
      break;
    case Decoder::text:
      rep.unparsed_lines = decode_text(d, opt, dir, col);
      break;
  }
  if (opt.decoder != Decoder::direct) {
    rep.ptw_words = col.words();
    const PtwLosses l = col.word_losses();
    rep.cut += l.cut;
    rep.stray_words += l.stray;
  }
  rep.unattributed = col.unattributed();
  col.finish();
  rep.decode_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // The process to keep; the others' blocks go.
  std::map<uint32_t, Process>& procs = col.processes();
  uint32_t pid = 0;
  if (opt.pid >= 0) {
    pid = uint32_t(opt.pid);
    if (!procs.count(pid) || procs[pid].events == 0)
      throw PtNoEvents(perf_data + ": no heaplab events of process " + std::to_string(pid));
  } else {
    uint64_t best = 0;
    for (const auto& [p, pr] : procs)
      if (pr.events > best) best = pr.events, pid = p;
    if (best == 0) throw PtNoEvents(perf_data + ": no heaplab events in the Intel PT data");
  }
  for (const auto& [p, pr] : procs)
    if (p != pid && pr.events) rep.other_processes.push_back(PtProcess{p, pr.events, names.count(p) ? names[p] : ""});
  const Process& proc = procs[pid];
  rep.pid = pid;
  rep.comm = names.count(pid) ? names[pid] : "";
  rep.events = proc.events;
  rep.lost = proc.lost;
  rep.duplicates = proc.duplicates;
  rep.misattributed = proc.misattributed;
  for (const Thread& t : col.threads()) rep.threads += t.pid == pid && t.block_seq > 0;

  *raw_path = dir + "/" + std::to_string(pid) + ".0.hlraw";
  FileHeader h{};
  std::memcpy(h.magic, kFileMagic, sizeof h.magic);
  h.version = kVersion;
  h.header_size = h.block_size = uint32_t(kBlockSize);
  h.record_size = uint32_t(kRecordSize);
  h.pid = pid;
  for (const TaskRecord& t : d.tasks)
    if (t.fork && t.pid == pid && t.tid == pid) h.ppid = t.ppid;
  h.clock = kClockMonotonic;  // perf time: nanoseconds
  h.start_ticks = h.start_mono_ns = proc.first_time;
  for (const TaskRecord& t : d.tasks)
    if (!t.fork && t.pid == pid && t.tid == pid) {
      h.flags |= kFlagCleanExit;  // the process exited (perf saw it), not killed mid-recording
      h.end_ticks = h.end_mono_ns = t.time;
    }
  h.next_thread = proc.threads;
  h.data_blocks = proc.blocks;
  h.cmdline_len = uint32_t(std::min<size_t>(rep.comm.size(), kCmdlineMax - 1));
  std::memcpy(h.cmdline, rep.comm.data(), h.cmdline_len);
  Fd raw(*raw_path);
  col.keep(pid);
  write_all(raw.fd, &h, sizeof h, *raw_path);
  // The rest of the header block and one (empty) mapped slot per thread.
  const std::vector<uint8_t> zero(kBlockSize, 0);
  write_all(raw.fd, zero.data(), kBlockSize - sizeof h, *raw_path);
  for (uint32_t s = 0; s < proc.threads; ++s) write_all(raw.fd, zero.data(), kBlockSize, *raw_path);
  return rep;
}

nlohmann::json report_to_json(const PtImportReport& r) {
  nlohmann::json others = nlohmann::json::array();
  for (const PtProcess& p : r.other_processes)
    others.push_back({{"pid", p.pid}, {"events", p.events}, {"comm", p.comm}});
  return {{"decoder", decoder_name(r.decoder)},
          {"pid", r.pid},
          {"comm", r.comm},
          {"buffers", r.per_cpu ? "per-cpu" : "per-thread"},
          {"pipe_mode", r.pipe_mode},
          {"pt_bytes", r.pt_bytes},
          {"ptwrite_words", r.ptw_words},
          {"events", r.events},
          {"threads", r.threads},
          {"lost_events", r.lost},
          {"cut_events", r.cut},
          {"stray_words", r.stray_words},
          {"short_words", r.short_words},
          {"unattributed_events", r.unattributed},
          {"aux_truncated", r.aux_truncated},
          {"aux_gaps", r.aux_gaps},
          {"aux_overlaps", r.aux_overlaps},
          {"duplicate_events", r.duplicates},
          {"misattributed_events", r.misattributed},
          {"unparsed_lines", r.unparsed_lines},
          {"overflow_packets", r.stream.overflows},
          {"decode_errors", r.stream.decode_errors},
          {"skipped_bytes", r.stream.skipped_bytes},
          {"file_truncated_at", r.file_truncated_at},
          {"sideband_lost", r.sideband_lost},
          {"auxtrace_errors", r.auxtrace_errors},
          {"other_processes", others},
          {"decode_seconds", r.decode_seconds}};
}

PtFileImport import_perf_pt_file(const std::string& perf_data, const std::string& output, const PtImportOptions& opt,
                                 normalise::NormaliseOptions nopt) {
  std::string dir = (std::filesystem::temp_directory_path() / "heaplab-import-XXXXXX").string();
  if (!mkdtemp(dir.data()))
    throw std::runtime_error("cannot create a temporary directory: " + std::string(std::strerror(errno)));
  struct Cleanup {
    std::string d;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } cleanup{dir};
  PtFileImport r;
  std::string raw_path;
  r.pt = decode_perf_pt(perf_data, dir, opt, &raw_path);
  nopt.capture_metadata["method"] = "intel-pt";
  nopt.capture_metadata["pt"] = report_to_json(r.pt);
  nopt.capture_metadata["perf_data"] = perf_data;
  r.trace = normalise::normalise_file(raw_path, output, nopt);
  return r;
}

}  // namespace heaplab::pt
