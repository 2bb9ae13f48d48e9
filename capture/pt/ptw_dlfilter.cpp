// heaplab's perf dlfilter (`perf script --itrace=w --dlfilter
// libheaplab_ptw_dlfilter.so --dlarg OUT`): perf's own Intel PT decoder
// hands it every ptwrite sample; it writes each as a 16-byte record
// {i32 cpu, u32 tid, u64 payload} to OUT and drops the sample, so perf
// formats and prints nothing. heaplab then reassembles the events per
// thread (capture/pt/pt_import.cpp), exactly as from the other routes.
//
// The sample layout (perf 6.1, perf_dlfilter.h): raw_data points at
// {u32 flags; u64 payload}, the payload unaligned at offset 4. A ptwrite
// sample comes from the synthesized attr PERF_TYPE_SYNTH (0x80000000),
// config PERF_SYNTH_INTEL_PTWRITE (0), both perf-internal constants.
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

extern "C" {
#include <perf/perf_dlfilter.h>
}

extern "C" struct perf_dlfilter_fns perf_dlfilter_fns;
struct perf_dlfilter_fns perf_dlfilter_fns;

namespace {

constexpr uint32_t kPerfTypeSynth = 0x80000000u;
constexpr uint64_t kSynthIntelPtwrite = 0;
constexpr size_t kBufBytes = 1 << 20;

struct Out {
  int fd = -1;
  size_t used = 0;
  bool failed = false;
  unsigned char buf[kBufBytes];
};

bool flush(Out* o) {
  size_t done = 0;
  while (done < o->used) {
    ssize_t n = write(o->fd, o->buf + done, o->used - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (!o->failed) fprintf(stderr, "heaplab dlfilter: cannot write its output: %s\n", strerror(errno));
      o->failed = true;
      break;
    }
    done += size_t(n);
  }
  o->used = 0;
  return !o->failed;
}

}  // namespace

extern "C" {

int start(void** data, void* ctx) {
  int argc = 0;
  char** argv = perf_dlfilter_fns.args ? perf_dlfilter_fns.args(ctx, &argc) : nullptr;
  if (argc != 1 || !argv || !argv[0]) {
    fprintf(stderr, "heaplab dlfilter: needs one --dlarg, the output file\n");
    return -1;
  }
  Out* o = static_cast<Out*>(malloc(sizeof(Out)));
  if (!o) return -1;
  o->used = 0;
  o->failed = false;
  o->fd = open(argv[0], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (o->fd < 0) {
    fprintf(stderr, "heaplab dlfilter: %s: %s\n", argv[0], strerror(errno));
    free(o);
    return -1;
  }
  *data = o;
  return 0;
}

int stop(void* data, void*) {
  Out* o = static_cast<Out*>(data);
  if (!o) return 0;
  const bool ok = flush(o);
  const bool closed = close(o->fd) == 0;
  free(o);
  return ok && closed ? 0 : -1;
}

int filter_event_early(void* data, const struct perf_dlfilter_sample* sample, void* ctx) {
  Out* o = static_cast<Out*>(data);
  if (sample->raw_size < 12 || !sample->raw_data) return 1;
  const struct perf_event_attr* attr = perf_dlfilter_fns.attr ? perf_dlfilter_fns.attr(ctx) : nullptr;
  if (attr ? (attr->type != kPerfTypeSynth || attr->config != kSynthIntelPtwrite)
           : (!sample->event || strcmp(sample->event, "ptwrite") != 0))
    return 1;
  uint32_t flags;
  memcpy(&flags, sample->raw_data, 4);
  (void)flags;
  if (o->used + 16 > kBufBytes && !flush(o)) return 1;
  const int32_t ids[2] = {sample->cpu, sample->tid};
  memcpy(o->buf + o->used, ids, 8);
  memcpy(o->buf + o->used + 8, static_cast<const unsigned char*>(sample->raw_data) + 4, 8);
  o->used += 16;
  return 1;  // nothing for perf to print
}

const char* filter_description(const char** long_description) {
  if (long_description)
    *long_description = "Writes ptwrite payloads as {i32 cpu, u32 tid, u64 payload} to --dlarg FILE";
  return "heaplab: ptwrite payloads to a file";
}

}  // extern "C"
