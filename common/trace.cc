#include "common/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/mutex.h"

namespace tessera::trace {
namespace internal {
std::atomic<bool> enabled{false};

// A span as the thread that ended it leaves it: the writer thread formats
// it, off the traced call's path (see Note [Tracing]).
struct EndedSpan {
  int tid = 0;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  const char* category = "";
  std::string name;
  std::string args;  // JSON members, comma-separated
  uint64_t flow_out = 0;
  uint64_t flow_in = 0;
};
}  // namespace internal

namespace {

using internal::EndedSpan;

// The file's first line, and its end after each write (see Note [Tracing]).
constexpr absl::string_view kOpening = "{\"traceEvents\":[\n";
constexpr absl::string_view kClosing = "\n]}\n";
// Lanes are made as spans need them (thousands when thousands of calls
// wait at once); the last is shared if a track ever needs more.
constexpr int kLanesPerTrack = 10000;
constexpr int kTracks = 11;  // Track values are 1..10
// How long the writer gathers events before a write: what a SIGKILL can
// lose at most.
constexpr absl::Duration kBatchDelay = absl::Milliseconds(2);

const char* TrackName(Track track) {
  switch (track) {
    case Track::kCallsOut:
      return "calls out";
    case Track::kCallsIn:
      return "calls in";
    case Track::kRRef:
      return "rrefs";
    case Track::kAutograd:
      return "distributed backward";
    case Track::kOptimizer:
      return "optimizer";
    case Track::kCollectives:
      return "collectives";
    case Track::kDdp:
      return "ddp buckets";
    case Track::kPipeline:
      return "pipeline";
    case Track::kCheckpoint:
      return "checkpoint";
    case Track::kMembership:
      return "membership";
  }
  return "other";
}

void AppendEscaped(std::string* out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", static_cast<int>(c));
        } else {
          out->push_back(c);
        }
    }
  }
}

std::string Quoted(std::string_view text) {
  std::string out = "\"";
  AppendEscaped(&out, text);
  out.push_back('"');
  return out;
}

// Appends a trace-clock time in nanoseconds as microseconds, to the ns.
void AppendMicros(std::string* out, int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const int64_t magnitude = ns < 0 ? -ns : ns;
  absl::StrAppend(out, sign, magnitude / 1000, ".", absl::Dec(magnitude % 1000, absl::kZeroPad3));
}

std::string Micros(int64_t ns) {
  std::string out;
  AppendMicros(&out, ns);
  return out;
}

// Appends the span's events, each line prefixed with ",\n".
void AppendSpanEvents(std::string* out, int pid, const EndedSpan& span) {
  absl::StrAppend(out, ",\n{\"ph\":\"X\",\"pid\":", pid, ",\"tid\":", span.tid, ",\"ts\":");
  AppendMicros(out, span.start_ns);
  out->append(",\"dur\":");
  AppendMicros(out, span.end_ns - span.start_ns);
  absl::StrAppend(out, ",\"cat\":\"", span.category, "\",\"name\":\"");
  AppendEscaped(out, span.name);
  absl::StrAppend(out, "\",\"args\":{", span.args, "}}");
  // A flow binds to the span enclosing its timestamp on its row: the
  // caller's starts the flow at its start, the callee's ends it at its start.
  for (const auto& [id, phase] :
       {std::pair{span.flow_out, "\"s\""}, std::pair{span.flow_in, "\"f\",\"bp\":\"e\""}}) {
    if (id == 0) continue;
    absl::StrAppend(out, ",\n{\"ph\":", phase, ",\"pid\":", pid, ",\"tid\":", span.tid, ",\"ts\":");
    AppendMicros(out, span.start_ns);
    absl::StrAppend(out, ",\"cat\":\"flow\",\"name\":\"call\",\"id\":\"0x", absl::Hex(id), "\"}");
  }
}

int64_t ReadNanos(clockid_t clock) {
  timespec now;
  clock_gettime(clock, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// This host's CLOCK_REALTIME minus its CLOCK_MONOTONIC: the offset that
// makes the trace clock read as wall time before (or without) alignment.
int64_t WallClockOffsetNanos() { return ReadNanos(CLOCK_REALTIME) - ReadNanos(CLOCK_MONOTONIC); }

std::atomic<int64_t> clock_offset_ns{WallClockOffsetNanos()};
std::atomic<int> trace_pid{0};

// The trace clock: CLOCK_MONOTONIC (a step of the wall clock mid-job does
// not tear the trace) plus the offset, read straight from the vDSO:
// absl::GetCurrentTimeNanos() costs several times more, and a span reads
// the clock twice.
int64_t NowNanos() {
  return ReadNanos(CLOCK_MONOTONIC) + clock_offset_ns.load(std::memory_order_relaxed);
}

class TraceFile;
TraceFile& File();

// The open trace file, its writer thread and the lanes in use.
class TraceFile {
 public:
  absl::Status Open(const std::string& dir, const std::string& worker_name, int pid) {
    MutexLock lock(&mu_);
    if (fd_ >= 0) return absl::OkStatus();
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create the trace directory ", dir, ": ", std::strerror(errno)));
    }
    std::string path = absl::StrCat(dir, "/", worker_name, ".json");
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot write the trace file ", path, ": ", std::strerror(errno)));
    }
    const std::string header = absl::StrCat(
        kOpening, "{\"ph\":\"M\",\"pid\":", pid,
        ",\"name\":\"process_name\",\"args\":{\"name\":", Quoted(worker_name), "}}", kClosing);
    if (::pwrite(fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write the trace file ", path));
    }
    fd_ = fd;
    path_ = std::move(path);
    end_ = header.size() - kClosing.size();
    trace_pid.store(pid, std::memory_order_relaxed);
    lanes_.assign(kTracks, {});
    stopping_ = false;
    queued_.clear();  // what a closed trace left
    ended_.clear();
    writer_ = std::thread([this] { WriteQueued(); });
    static const bool flushed_at_exit = [] {
      std::atexit([] { File().Close(); });
      return true;
    }();
    (void)flushed_at_exit;
    internal::enabled.store(true, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  // Writes what is queued, stops the writer and closes the file.
  void Close() {
    std::thread writer;
    {
      MutexLock lock(&mu_);
      internal::enabled.store(false, std::memory_order_relaxed);
      if (fd_ < 0) return;
      stopping_ = true;
      queued_cv_.Signal();
      writer = std::move(writer_);
    }
    writer.join();
    MutexLock lock(&mu_);
    ::close(fd_);
    fd_ = -1;
    path_.clear();
  }

  std::string path() {
    MutexLock lock(&mu_);
    return path_;
  }

  // Queues whole event lines for the writer (see Note [Tracing]).
  void Append(const std::string& events) {
    MutexLock lock(&mu_);
    AppendLocked(events);
  }

  // The lowest lane of `track` free since `start_ns` (a span may begin in
  // the past: a call served began when it arrived), named in the file on
  // first use.
  int TakeLane(Track track, int64_t start_ns) {
    MutexLock lock(&mu_);
    if (fd_ < 0) return 0;
    const int base = static_cast<int>(track) * kLanesPerTrack;
    std::vector<Lane>& lanes = lanes_[static_cast<int>(track)];
    int lane = 0;
    while (lane < static_cast<int>(lanes.size()) &&
           (lanes[lane].taken || lanes[lane].free_since_ns > start_ns)) {
      ++lane;
    }
    if (lane == static_cast<int>(lanes.size())) {
      if (lane < kLanesPerTrack)
        lanes.emplace_back();
      else
        lane = kLanesPerTrack - 1;
    }
    Lane& taken = lanes[lane];
    taken.taken = true;
    if (!taken.named) {
      taken.named = true;
      const int pid = trace_pid.load(std::memory_order_relaxed);
      AppendLocked(absl::StrCat(
          "{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", base + lane,
          ",\"name\":\"thread_name\",\"args\":{\"name\":\"", TrackName(track), " ", lane,
          "\"}},\n{\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", base + lane,
          ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", base + lane, "}}"));
    }
    return lane;
  }

  // Queues an ended span for the writer and, unless it passes its lane on
  // (EndAndBegin), frees the lane: one lock for both.
  void AppendSpan(EndedSpan span, bool free_lane) {
    MutexLock lock(&mu_);
    if (fd_ < 0) return;
    WakeWriterIfIdle();
    const int track = span.tid / kLanesPerTrack;
    const int lane = span.tid % kLanesPerTrack;
    const int64_t end_ns = span.end_ns;
    ended_.push_back(std::move(span));
    if (!free_lane) return;
    std::vector<Lane>& lanes = lanes_[track];
    if (lane >= static_cast<int>(lanes.size())) return;  // begun before a Stop() and Start()
    Lane& freed = lanes[lane];
    freed.taken = false;
    freed.free_since_ns = std::max(freed.free_since_ns, end_ns);
  }

 private:
  void AppendLocked(const std::string& events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fd_ < 0) return;
    WakeWriterIfIdle();
    absl::StrAppend(&queued_, ",\n", events);
  }

  // Called before queueing: the writer sleeps only while nothing is queued.
  void WakeWriterIfIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queued_.empty() && ended_.empty()) queued_cv_.Signal();
  }

  // The writer thread: appends what is queued, a batch per pwrite().
  void WriteQueued() {
    std::string batch;
    std::vector<EndedSpan> spans;
    MutexLock lock(&mu_);
    while (true) {
      queued_cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return !queued_.empty() || !ended_.empty() || stopping_;
      });
      if (queued_.empty() && ended_.empty()) return;
      // Gathers what comes in the next moment into the same write: one
      // wake-up and one pwrite() per batch, not per span.
      queued_cv_.WaitUntil(
          &mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_; },
          absl::Now() + kBatchDelay);
      batch.swap(queued_);
      queued_.clear();
      spans.swap(ended_);
      ended_.clear();
      const off_t at = end_;
      const int fd = fd_;
      mu_.Unlock();  // formats and writes run while spans queue more
      const int pid = trace_pid.load(std::memory_order_relaxed);
      for (const EndedSpan& span : spans) AppendSpanEvents(&batch, pid, span);
      spans.clear();
      batch.append(kClosing.data(), kClosing.size());
      const bool written =
          ::pwrite(fd, batch.data(), batch.size(), at) == static_cast<ssize_t>(batch.size());
      mu_.Lock();
      if (written) end_ += batch.size() - kClosing.size();
      batch.clear();
    }
  }

  Mutex mu_;
  CondVar queued_cv_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::string path_ ABSL_GUARDED_BY(mu_);
  off_t end_ ABSL_GUARDED_BY(mu_) = 0;       // where the closing "\n]}\n" starts
  std::string queued_ ABSL_GUARDED_BY(mu_);  // ",\n"-prefixed events not yet written
  std::vector<EndedSpan> ended_ ABSL_GUARDED_BY(mu_);  // spans not yet formatted
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread writer_ ABSL_GUARDED_BY(mu_);
  struct Lane {
    bool taken = false;
    bool named = false;         // its thread_name event is written
    int64_t free_since_ns = 0;  // the end of its last span
  };
  std::vector<std::vector<Lane>> lanes_ ABSL_GUARDED_BY(mu_);  // by track
};

TraceFile& File() {
  static auto* file = new TraceFile();  // never destroyed: spans may end at exit
  return *file;
}

}  // namespace

absl::Status Start(const std::string& dir, const std::string& worker_name, int pid) {
  return File().Open(dir, worker_name, pid);
}

absl::Status StartFromEnvironment(const std::string& worker_name, int pid) {
  const char* dir = std::getenv("TESSERA_TRACE");
  if (dir == nullptr || *dir == '\0') return absl::OkStatus();
  return Start(dir, worker_name, pid);
}

void Stop() { File().Close(); }

std::string FilePath() { return File().path(); }

double NowMicros() { return static_cast<double>(NowNanos()) / 1000.0; }

double HostClockMicros() { return static_cast<double>(ReadNanos(CLOCK_MONOTONIC)) / 1000.0; }

double ClockOffsetMicros() {
  return static_cast<double>(clock_offset_ns.load(std::memory_order_relaxed)) / 1000.0;
}

void SetClockOffset(double offset_us, double error_bound_us) {
  clock_offset_ns.store(static_cast<int64_t>(offset_us * 1000), std::memory_order_relaxed);
  if (!Enabled()) return;
  File().Append(absl::StrCat("{\"ph\":\"M\",\"pid\":", trace_pid.load(std::memory_order_relaxed),
                             ",\"name\":\"tessera_clock\",\"args\":{\"offset_us\":",
                             Micros(static_cast<int64_t>(offset_us * 1000)), ",\"error_bound_us\":",
                             Micros(static_cast<int64_t>(error_bound_us * 1000)), "}}"));
}

uint64_t NewFlowId() {
  static std::atomic<uint64_t> next{[] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32 | device()) & ~uint64_t{0xFFFFF};
  }()};
  uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id == 0 ? next.fetch_add(1, std::memory_order_relaxed) : id;
}

Span Span::Begin(Track track, const char* category, std::string_view name, double start_us) {
  Span span;
  if (!Enabled()) return span;
  span.track_ = track;
  span.start_ns_ = start_us >= 0 ? static_cast<int64_t>(start_us * 1000) : NowNanos();
  span.lane_ = File().TakeLane(track, span.start_ns_);
  span.category_ = category;
  span.name_ = std::string(name);
  return span;
}

Span& Span::operator=(Span&& other) noexcept {
  if (this == &other) return *this;
  End();
  track_ = other.track_;
  lane_ = std::exchange(other.lane_, -1);
  start_ns_ = other.start_ns_;
  category_ = other.category_;
  name_ = std::move(other.name_);
  args_ = std::move(other.args_);
  flow_out_ = std::exchange(other.flow_out_, 0);
  flow_in_ = std::exchange(other.flow_in_, 0);
  return *this;
}

// Arguments are escaped here, as JSON members, without temporaries.
void Span::Arg(std::string_view key, std::string_view value) {
  if (!active()) return;
  args_.append(args_.empty() ? "\"" : ",\"");
  AppendEscaped(&args_, key);
  args_.append("\":\"");
  AppendEscaped(&args_, value);
  args_.push_back('"');
}

void Span::Arg(std::string_view key, int64_t value) {
  if (!active()) return;
  args_.append(args_.empty() ? "\"" : ",\"");
  AppendEscaped(&args_, key);
  absl::StrAppend(&args_, "\":", value);
}

// What a span hands the writer when it ends at `end_ns`; the span is spent.
EndedSpan Span::Release(int64_t end_ns) {
  EndedSpan ended;
  ended.tid = static_cast<int>(track_) * kLanesPerTrack + lane_;
  ended.start_ns = start_ns_;
  ended.end_ns = std::max(end_ns, start_ns_);
  ended.category = category_;
  ended.name = std::move(name_);
  ended.args = std::move(args_);
  ended.flow_out = std::exchange(flow_out_, 0);
  ended.flow_in = std::exchange(flow_in_, 0);
  lane_ = -1;
  return ended;
}

void Span::End() {
  if (!active()) return;
  File().AppendSpan(Release(NowNanos()), /*free_lane=*/true);
}

Span Span::EndAndBegin(std::string name) {
  if (!active()) return Span();
  const int64_t now = NowNanos();
  Span next;  // on this lane, which passes to it
  next.track_ = track_;
  next.lane_ = lane_;
  next.start_ns_ = now;
  next.category_ = category_;
  next.name_ = std::move(name);
  File().AppendSpan(Release(now), /*free_lane=*/false);
  return next;
}

void Instant(Track track, std::string_view category, std::string_view name,
             std::vector<std::pair<std::string, std::string>> args) {
  if (!Enabled()) return;
  std::string members;
  for (const auto& [key, value] : args) {
    if (!members.empty()) members.push_back(',');
    absl::StrAppend(&members, Quoted(key), ":", Quoted(value));
  }
  File().Append(absl::StrCat(
      "{\"ph\":\"i\",\"s\":\"p\",\"pid\":", trace_pid.load(std::memory_order_relaxed),
      ",\"tid\":", static_cast<int>(track) * kLanesPerTrack, ",\"ts\":", Micros(NowNanos()),
      ",\"cat\":", Quoted(category), ",\"name\":", Quoted(name), ",\"args\":{", members, "}}"));
}

}  // namespace tessera::trace
