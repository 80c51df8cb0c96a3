#include "common/trace.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/mutex.h"

namespace tessera::trace {
namespace internal {
std::atomic<bool> enabled{false};
}  // namespace internal

namespace {

constexpr absl::string_view kClosing = "\n]}\n";
constexpr int kLanesPerTrack = 100;

const char* TrackName(Track track) {
  switch (track) {
    case Track::kCallsOut: return "calls out";
    case Track::kCallsIn: return "calls in";
    case Track::kRRef: return "rrefs";
    case Track::kAutograd: return "distributed backward";
    case Track::kOptimizer: return "optimizer";
    case Track::kCollectives: return "collectives";
    case Track::kDdp: return "ddp buckets";
    case Track::kPipeline: return "pipeline";
    case Track::kCheckpoint: return "checkpoint";
    case Track::kMembership: return "membership";
  }
  return "other";
}

void AppendEscaped(std::string* out, std::string_view text) {
  for (char c : text) {
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\n': out->append("\\n"); break;
      case '\t': out->append("\\t"); break;
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

// The open trace file and the lanes in use.
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
    fd_ = fd;
    path_ = std::move(path);
    pid_ = pid;
    lanes_.assign(kLanesPerTrack * 11, false);
    named_lanes_.assign(kLanesPerTrack * 11, false);
    const std::string header = absl::StrCat(
        "{\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":", pid_,
        ",\"name\":\"process_name\",\"args\":{\"name\":", Quoted(worker_name), "}}", kClosing);
    if (::pwrite(fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size())) {
      ::close(fd_);
      fd_ = -1;
      return absl::InternalError(absl::StrCat("cannot write the trace file ", path_));
    }
    end_ = header.size() - kClosing.size();
    internal::enabled.store(true, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  void Close() {
    MutexLock lock(&mu_);
    internal::enabled.store(false, std::memory_order_relaxed);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    path_.clear();
  }

  std::string path() {
    MutexLock lock(&mu_);
    return path_;
  }
  int pid() {
    MutexLock lock(&mu_);
    return pid_;
  }

  // Appends whole event lines, keeping the file valid JSON (Note [Tracing]).
  void Append(const std::string& events) {
    MutexLock lock(&mu_);
    AppendLocked(events);
  }

  // The lowest free lane of `track`, named in the file on first use.
  int TakeLane(Track track) {
    MutexLock lock(&mu_);
    const int base = static_cast<int>(track) * kLanesPerTrack;
    int lane = 0;
    while (lane < kLanesPerTrack - 1 && lanes_[base + lane]) ++lane;
    lanes_[base + lane] = true;  // the last lane is shared when all are taken
    if (!named_lanes_[base + lane] && fd_ >= 0) {
      named_lanes_[base + lane] = true;
      AppendLocked(absl::StrCat("{\"ph\":\"M\",\"pid\":", pid_, ",\"tid\":", base + lane,
                                ",\"name\":\"thread_name\",\"args\":{\"name\":\"",
                                TrackName(track), " ", lane, "\"}},\n{\"ph\":\"M\",\"pid\":", pid_,
                                ",\"tid\":", base + lane,
                                ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":",
                                base + lane, "}}"));
    }
    return lane;
  }

  void FreeLane(Track track, int lane) {
    MutexLock lock(&mu_);
    lanes_[static_cast<int>(track) * kLanesPerTrack + lane] = false;
  }

 private:
  void AppendLocked(const std::string& events) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (fd_ < 0) return;
    std::string bytes = absl::StrCat(",\n", events, kClosing);
    if (::pwrite(fd_, bytes.data(), bytes.size(), end_) == static_cast<ssize_t>(bytes.size())) {
      end_ += bytes.size() - kClosing.size();
    }
  }

  Mutex mu_;
  int fd_ ABSL_GUARDED_BY(mu_) = -1;
  std::string path_ ABSL_GUARDED_BY(mu_);
  int pid_ ABSL_GUARDED_BY(mu_) = 0;
  off_t end_ ABSL_GUARDED_BY(mu_) = 0;  // where the closing "\n]}\n" starts
  std::vector<bool> lanes_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> named_lanes_ ABSL_GUARDED_BY(mu_);
};

TraceFile& File() {
  static auto* file = new TraceFile();  // never destroyed: spans may end at exit
  return *file;
}

std::atomic<double> clock_offset_us{0};

std::string Micros(double us) { return absl::StrFormat("%.3f", us); }

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

double NowMicros() {
  return static_cast<double>(absl::GetCurrentTimeNanos()) / 1000.0 +
         clock_offset_us.load(std::memory_order_relaxed);
}

void SetClockOffset(double offset_us, double error_bound_us) {
  clock_offset_us.store(offset_us, std::memory_order_relaxed);
  if (!Enabled()) return;
  File().Append(absl::StrCat("{\"ph\":\"M\",\"pid\":", File().pid(),
                             ",\"name\":\"tessera_clock\",\"args\":{\"offset_us\":",
                             Micros(offset_us), ",\"error_bound_us\":", Micros(error_bound_us),
                             "}}"));
}

uint64_t NewFlowId() {
  static std::atomic<uint64_t> next{[] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32 | device()) & ~uint64_t{0xFFFFF};
  }()};
  uint64_t id = next.fetch_add(1, std::memory_order_relaxed);
  return id == 0 ? next.fetch_add(1, std::memory_order_relaxed) : id;
}

Span Span::Begin(Track track, std::string_view category, std::string name, double start_us) {
  Span span;
  if (!Enabled()) return span;
  span.track_ = track;
  span.lane_ = File().TakeLane(track);
  span.start_us_ = start_us >= 0 ? start_us : NowMicros();
  span.category_ = std::string(category);
  span.name_ = std::move(name);
  return span;
}

Span& Span::operator=(Span&& other) noexcept {
  if (this == &other) return *this;
  End();
  track_ = other.track_;
  lane_ = std::exchange(other.lane_, -1);
  start_us_ = other.start_us_;
  category_ = std::move(other.category_);
  name_ = std::move(other.name_);
  args_ = std::move(other.args_);
  flow_out_ = std::exchange(other.flow_out_, 0);
  flow_in_ = std::exchange(other.flow_in_, 0);
  return *this;
}

void Span::Arg(std::string_view key, std::string_view value) {
  if (!active()) return;
  if (!args_.empty()) args_.push_back(',');
  absl::StrAppend(&args_, Quoted(key), ":", Quoted(value));
}

void Span::Arg(std::string_view key, int64_t value) {
  if (!active()) return;
  if (!args_.empty()) args_.push_back(',');
  absl::StrAppend(&args_, Quoted(key), ":", value);
}

void Span::End() {
  if (!active()) return;
  Write(NowMicros());
  Release();
}

void Span::Write(double end_us) {
  end_us = std::max(end_us, start_us_);
  TraceFile& file = File();
  const int pid = file.pid();
  const int tid = static_cast<int>(track_) * kLanesPerTrack + lane_;
  std::string events =
      absl::StrCat("{\"ph\":\"X\",\"pid\":", pid, ",\"tid\":", tid, ",\"ts\":", Micros(start_us_),
                   ",\"dur\":", Micros(end_us - start_us_), ",\"cat\":", Quoted(category_),
                   ",\"name\":", Quoted(name_), ",\"args\":{", args_, "}}");
  // A flow binds to the span enclosing its timestamp on its row: the
  // caller's starts the flow at its start, the callee's ends it at its start.
  if (flow_out_ != 0) {
    absl::StrAppend(&events, ",\n{\"ph\":\"s\",\"pid\":", pid, ",\"tid\":", tid,
                    ",\"ts\":", Micros(start_us_), ",\"cat\":\"flow\",\"name\":\"call\",\"id\":\"0x",
                    absl::Hex(flow_out_), "\"}");
  }
  if (flow_in_ != 0) {
    absl::StrAppend(&events, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"pid\":", pid, ",\"tid\":", tid,
                    ",\"ts\":", Micros(start_us_), ",\"cat\":\"flow\",\"name\":\"call\",\"id\":\"0x",
                    absl::Hex(flow_in_), "\"}");
  }
  file.Append(events);
}

Span Span::EndAndBegin(std::string name) {
  if (!active()) return Span();
  const double now = NowMicros();
  Write(now);
  Span next;  // on this lane, which passes to it
  next.track_ = track_;
  next.lane_ = std::exchange(lane_, -1);
  next.start_us_ = now;
  next.category_ = std::move(category_);
  next.name_ = std::move(name);
  return next;
}

void Span::Release() {
  File().FreeLane(track_, lane_);
  lane_ = -1;
}

void Instant(Track track, std::string_view category, std::string_view name,
             std::vector<std::pair<std::string, std::string>> args) {
  if (!Enabled()) return;
  TraceFile& file = File();
  std::string members;
  for (const auto& [key, value] : args) {
    if (!members.empty()) members.push_back(',');
    absl::StrAppend(&members, Quoted(key), ":", Quoted(value));
  }
  file.Append(absl::StrCat(
      "{\"ph\":\"i\",\"s\":\"p\",\"pid\":", file.pid(),
      ",\"tid\":", static_cast<int>(track) * kLanesPerTrack, ",\"ts\":", Micros(NowMicros()),
      ",\"cat\":", Quoted(category), ",\"name\":", Quoted(name), ",\"args\":{", members, "}}"));
}

}  // namespace tessera::trace
