// The runtime's tracing and metrics: starting them, aligning the trace
// clock, recording calls served, the summary line at shutdown.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/await_call.h"
#include "common/logging.h"
#include "common/metrics.h"
#include "common/trace.h"
#include "rpc/call_telemetry.h"
#include "rpc/runtime.h"

namespace tessera::rpc {
namespace {

// Note [Trace clock alignment]: a worker's trace clock is its host's
// monotonic clock plus an offset (common/trace.h). Rank 0 keeps its own:
// its host's wall clock, so the job's trace reads in wall time. When
// tracing, each other rank asks rank 0 for its trace clock kClockSamples
// times once it has met the workers, and keeps the sample of the shortest
// round trip: offset = rank 0's reading − the midpoint of the local send
// and receive times on the host clock. The reading was taken somewhere
// inside that round trip, so the error is at most half of it (recorded in
// the file as error_bound_us): tens of microseconds on one host or a LAN,
// about half a ping across a WAN. Hosts' monotonic clocks differ by their
// boot times (the multi-host tests give each host its own, through a time
// namespace); wall clocks differ by what NTP left. Clocks drift a few µs per
// second; long jobs re-align on no schedule (not done: a job of hours may be
// off by some milliseconds at its end).
struct TraceClockRequest {
  static constexpr const char* kService = services::kTraceClock;
  static constexpr bool kCarriesUserValues = false;
  using Response = double;
  auto Fields() { return std::tie(); }
};
constexpr int kClockSamples = 8;
constexpr absl::Duration kClockTimeout = absl::Seconds(5);

}  // namespace

absl::Status Runtime::StartTelemetry() {
  absl::Status traced = options_.trace_dir.empty()
                            ? trace::StartFromEnvironment(options_.name, options_.rank)
                            : trace::Start(options_.trace_dir, options_.name, options_.rank);
  if (!traced.ok()) return Annotate(traced, options_.name + " cannot trace");
  print_metrics_ = metrics::EnableFromEnvironment();
  if (options_.metrics) metrics::Enable();
  Serve<TraceClockRequest>(internal_,
                           [](CallContext&, TraceClockRequest) { return trace::NowMicros(); });
  return absl::OkStatus();
}

void Runtime::AlignTraceClock() {
  if (!trace::Enabled()) return;
  if (options_.rank == 0) {
    trace::SetClockOffset(trace::ClockOffsetMicros(), 0);
    return;
  }
  double best_round_trip = -1;
  double best_offset = 0;
  for (int i = 0; i < kClockSamples; ++i) {
    const double sent = trace::HostClockMicros();
    auto reading = AwaitCall(CallService(0, TraceClockRequest{}, kClockTimeout), kClockTimeout);
    const double received = trace::HostClockMicros();
    if (!reading.ok()) {
      TESSERA_LOG(WARNING) << options_.name
                           << ": trace clock not aligned to rank 0's: " << reading.status();
      return;
    }
    if (best_round_trip < 0 || received - sent < best_round_trip) {
      best_round_trip = received - sent;
      best_offset = *reading - (sent + received) / 2;
    }
  }
  trace::SetClockOffset(best_offset, best_round_trip / 2);
}

std::shared_ptr<IncomingCall> Runtime::RecordIncoming(int from_rank, const Message& request) {
  std::string from;
  if (!membership_.NameAndRole(from_rank, &from)) from = absl::StrCat("rank ", from_rank);
  return IncomingCall::Start(from, request);
}

std::shared_ptr<OutgoingCall> Runtime::RecordOutgoing(int to_rank, Message* request) const {
  std::string to;
  if (!membership_.NameAndRole(to_rank, &to)) to = absl::StrCat("rank ", to_rank);
  return OutgoingCall::Start(to, request);
}

void Runtime::PrintMetrics() const {
  if (!print_metrics_) return;
  const std::string line = metrics::Snapshot().Summary(options_.name) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace tessera::rpc
