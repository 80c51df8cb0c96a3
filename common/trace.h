// Tracing: what a job did, as Chrome trace-event files that Perfetto
// (ui.perfetto.dev) and chrome://tracing open.
//
// Note [Tracing]: TESSERA_TRACE=DIR (or RpcOptions::trace_dir, or
// tessera-run --trace DIR) makes each worker process write
// DIR/<worker name>.json, {"traceEvents": [...]}: one complete event ("X")
// per span — RPC calls on the caller (send to response) and on the callee
// (queued, then running), RRef creations and fetches, distributed backward
// passes, optimizer steps, collectives and DDP bucket allreduces, pipeline
// stage forward and backward per micro-batch, checkpoint saves — instant
// events for membership changes, and flow events ("s"/"f") that link a
// call's caller span to its callee span on the other worker (the id travels
// in the request's Envelope.trace_id).
//
// The file is valid JSON after every write, so a worker killed mid-run
// leaves a file that parses: the thread that ends a span queues its fields
// (moved, not formatted); the process's trace writer thread formats all
// that are queued and appends them with one pwrite() that overwrites the
// closing "\n]}\n" with ",\n<events>\n]}\n". A SIGKILL loses only the events queued and not
// yet written: the writer wakes when the first event is queued and gathers
// for 2 ms more before it writes (one wake-up and one write per batch, not
// per span: per span, they cost the traced job more than the span itself),
// so at most the last 2 ms. (A write the kernel cuts short when SIGKILL
// lands while it crosses a page boundary could leave one partial last line;
// scripts/tessera-trace drops such a line.) A worker that exits writes all.
//
// Rows: spans run concurrently (64 calls in flight) and begin and end on
// different threads, while a trace viewer nests complete events per row, so
// a span is drawn on the lowest free *lane* of its track (tid = track ×
// 10000 + lane, named "calls out 0", ...): spans on one lane never overlap.
//
// Clocks: timestamps are this host's CLOCK_MONOTONIC plus an offset. The
// offset starts as the host's wall clock minus its monotonic one (so a
// trace reads in wall time) and is replaced by one estimated against rank
// 0's trace clock when the worker meets the others (rpc runtime, see Note
// [Trace clock alignment]); that offset and its error bound are recorded in
// the file's "tessera_clock" metadata event.
//
// Cost: off (the default), Enabled() is one relaxed atomic load and nothing
// else runs: spans are inactive objects, no allocation, no lock. On, a span
// costs a lock to take its lane and a lock to queue its fields when it
// ends; formatting and writing happen on the writer thread, in batches, off
// the traced call's path (measured: docs/benchmarks-history.md, "Tracing's
// cost").
//
// The trace is the process's, like its log: the first Start() wins and names
// the file; a second runtime in the same process writes to it too.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace tessera::trace {

// The rows a span can be drawn on.
enum class Track : int {
  kCallsOut = 1,
  kCallsIn = 2,
  kRRef = 3,
  kAutograd = 4,
  kOptimizer = 5,
  kCollectives = 6,
  kDdp = 7,
  kPipeline = 8,
  kCheckpoint = 9,
  kMembership = 10,
};

namespace internal {
extern std::atomic<bool> enabled;
struct EndedSpan;
}  // namespace internal

// Whether this process is tracing.
inline bool Enabled() { return internal::enabled.load(std::memory_order_relaxed); }

// Starts tracing to `dir`/`worker_name`.json (creating `dir`); `pid` is the
// process id shown in the trace (the worker's rank). A no-op returning OK
// when tracing has started already.
absl::Status Start(const std::string& dir, const std::string& worker_name, int pid);
// Start() into TESSERA_TRACE's directory when it is set; OK otherwise.
absl::Status StartFromEnvironment(const std::string& worker_name, int pid);
// Stops tracing and closes the file (tests; the file stays valid).
void Stop();
// The path of the file being written; empty when off.
std::string FilePath();

// Microseconds on the trace clock (the host clock plus the offset).
double NowMicros();
// Microseconds on this host's clock (CLOCK_MONOTONIC), without the offset.
double HostClockMicros();
// The offset in use: trace clock minus host clock, in microseconds.
double ClockOffsetMicros();
// Sets the offset to add to this host's clock to read rank 0's trace clock,
// and records it with the bound on its error, both in microseconds.
void SetClockOffset(double offset_us, double error_bound_us);

// A unique id for a flow between two workers (never 0).
uint64_t NewFlowId();

// One span: begun, then ended once (by End() or the destructor). Inactive
// (all methods do nothing) when tracing is off.
class Span {
 public:
  Span() = default;
  // Begins now; `start_us` (trace clock) when given instead. Off, nothing
  // is copied: a name built for the span should be built only when
  // Enabled().
  static Span Begin(Track track, const char* category, std::string_view name,
                    double start_us = -1);
  Span(Span&& other) noexcept { *this = std::move(other); }
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { End(); }

  bool active() const { return lane_ >= 0; }
  // An argument shown with the span (strings are escaped).
  void Arg(std::string_view key, std::string_view value);
  void Arg(std::string_view key, int64_t value);
  // This span starts a flow that `id` ends on another worker, or ends one.
  void FlowOut(uint64_t id) { flow_out_ = id; }
  void FlowIn(uint64_t id) { flow_in_ = id; }
  // Writes the span (ending now) and frees its lane.
  void End();
  // Ends this span and begins `name` on the same lane, now.
  Span EndAndBegin(std::string name);

 private:
  // The span as it ends at `end_ns`, for the writer to format; spent after.
  internal::EndedSpan Release(int64_t end_ns);
  Track track_ = Track::kCallsOut;
  int lane_ = -1;
  int64_t start_ns_ = 0;  // trace clock
  const char* category_ = "";
  std::string name_;
  std::string args_;  // JSON members, comma-separated
  uint64_t flow_out_ = 0;
  uint64_t flow_in_ = 0;
};

// An instant event (membership changes), on `track`'s first row.
void Instant(Track track, std::string_view category, std::string_view name,
             std::vector<std::pair<std::string, std::string>> args = {});

}  // namespace tessera::trace
