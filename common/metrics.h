// Metrics: the process's counters and latency histograms — calls in and out
// per function, bytes, errors by status code, retried connects, open
// connections, time in each kind of collective.
//
// Note [Metrics]: off by default; TESSERA_METRICS=1 (or RpcOptions::metrics,
// or tracing) turns them on. Off, each recording site costs one relaxed
// atomic load; on, one mutex and a map lookup. Read a snapshot with
// tessera::Worker::metrics() (or metrics::Snapshot()); with TESSERA_METRICS=1
// each worker prints Summary() as one line when it shuts down. Like the
// trace (common/trace.h), the metrics are the process's: a second runtime
// in one process adds to the same counters. Open connections are counted
// always (one atomic add per connection).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tessera::metrics {

// A latency distribution: log-spaced buckets (factor √2 from 1 µs), so
// percentiles are upper bounds within 41%.
struct LatencyStats {
  uint64_t count = 0;
  absl::Duration total;
  absl::Duration p50;
  absl::Duration p99;
  absl::Duration max;
};

struct CallStats {
  uint64_t calls = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;  // request bytes (out) or response bytes (in)
  LatencyStats latency;
};

struct MetricsSnapshot {
  bool enabled = false;
  std::map<std::string, CallStats> calls_out;  // by function called
  std::map<std::string, CallStats> calls_in;   // by function served
  // Failed calls in and out, by absl status code name ("DEADLINE_EXCEEDED").
  std::map<std::string, uint64_t> errors_by_code;
  uint64_t connect_retries = 0;
  int64_t open_connections = 0;
  std::map<std::string, LatencyStats> collectives;  // "allreduce", ...
  // One line: totals, the busiest functions, collective time.
  std::string Summary(const std::string& worker) const;
};

namespace internal {
extern std::atomic<bool> enabled;
}  // namespace internal

inline bool Enabled() { return internal::enabled.load(std::memory_order_relaxed); }
void Enable();
// Enable() when TESSERA_METRICS=1; whether it is set.
bool EnableFromEnvironment();

void RecordCallOut(std::string_view function, const absl::Status& status, uint64_t bytes,
                   absl::Duration latency);
void RecordCallIn(std::string_view function, const absl::Status& status, uint64_t bytes,
                  absl::Duration latency);
void RecordConnectRetry();
void RecordCollective(std::string_view name, absl::Duration latency);
void ConnectionOpened();
void ConnectionClosed();

// Counts one open connection for as long as it lives (a member of a
// transport's connection object).
class OpenConnection {
 public:
  OpenConnection() { ConnectionOpened(); }
  ~OpenConnection() { ConnectionClosed(); }
  OpenConnection(const OpenConnection&) = delete;
  OpenConnection& operator=(const OpenConnection&) = delete;
};

MetricsSnapshot Snapshot();
// Clears the counters and turns metrics off again (tests).
void Reset();

}  // namespace tessera::metrics
