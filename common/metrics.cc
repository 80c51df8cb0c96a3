#include "common/metrics.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"

namespace tessera::metrics {
namespace internal {
std::atomic<bool> enabled{false};
}  // namespace internal

namespace {

constexpr int kBuckets = 64;

// Bucket b holds latencies up to 2^(b/2) µs.
int BucketOf(absl::Duration latency) {
  const double us = std::max(1.0, absl::ToDoubleMicroseconds(latency));
  return std::min(kBuckets - 1, static_cast<int>(std::ceil(2 * std::log2(us))));
}

absl::Duration BucketBound(int bucket) { return absl::Microseconds(std::exp2(bucket / 2.0)); }

struct Histogram {
  std::array<uint64_t, kBuckets> counts{};
  uint64_t count = 0;
  absl::Duration total;
  absl::Duration max;

  void Add(absl::Duration latency) {
    ++counts[BucketOf(latency)];
    ++count;
    total += latency;
    max = std::max(max, latency);
  }
  absl::Duration Percentile(double fraction) const {
    const uint64_t rank = static_cast<uint64_t>(std::ceil(fraction * count));
    uint64_t seen = 0;
    for (int b = 0; b < kBuckets; ++b) {
      seen += counts[b];
      if (seen >= rank && seen > 0) return std::min(BucketBound(b), max);
    }
    return max;
  }
  LatencyStats Stats() const { return {count, total, Percentile(0.5), Percentile(0.99), max}; }
};

struct Calls {
  uint64_t calls = 0;
  uint64_t errors = 0;
  uint64_t bytes = 0;
  Histogram latency;
};

struct Counters {
  Mutex mu;
  std::map<std::string, Calls, std::less<>> out ABSL_GUARDED_BY(mu);
  std::map<std::string, Calls, std::less<>> in ABSL_GUARDED_BY(mu);
  std::map<std::string, uint64_t> errors ABSL_GUARDED_BY(mu);
  std::map<std::string, Histogram, std::less<>> collectives ABSL_GUARDED_BY(mu);
  std::atomic<uint64_t> retries{0};
  std::atomic<int64_t> connections{0};
};

Counters& Process() {
  static auto* counters = new Counters();  // never destroyed: recorded into at exit
  return *counters;
}

void RecordCall(std::map<std::string, Calls, std::less<>>& table, std::string_view function,
                const absl::Status& status, uint64_t bytes, absl::Duration latency,
                Counters& counters) ABSL_EXCLUSIVE_LOCKS_REQUIRED(counters.mu) {
  auto it = table.find(function);
  if (it == table.end()) it = table.emplace(std::string(function), Calls()).first;
  Calls& calls = it->second;
  ++calls.calls;
  calls.bytes += bytes;
  calls.latency.Add(latency);
  if (!status.ok()) {
    ++calls.errors;
    ++counters.errors[absl::StatusCodeToString(status.code())];
  }
}

std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.2fms", absl::ToDoubleMilliseconds(d));
}

}  // namespace

void Enable() { internal::enabled.store(true, std::memory_order_relaxed); }

bool EnableFromEnvironment() {
  const char* value = std::getenv("TESSERA_METRICS");
  if (value == nullptr || std::string_view(value) != "1") return false;
  Enable();
  return true;
}

void RecordCallOut(std::string_view function, const absl::Status& status, uint64_t bytes,
                   absl::Duration latency) {
  if (!Enabled()) return;
  Counters& counters = Process();
  MutexLock lock(&counters.mu);
  RecordCall(counters.out, function, status, bytes, latency, counters);
}

void RecordCallIn(std::string_view function, const absl::Status& status, uint64_t bytes,
                  absl::Duration latency) {
  if (!Enabled()) return;
  Counters& counters = Process();
  MutexLock lock(&counters.mu);
  RecordCall(counters.in, function, status, bytes, latency, counters);
}

void RecordConnectRetry() { Process().retries.fetch_add(1, std::memory_order_relaxed); }

void RecordCollective(std::string_view name, absl::Duration latency) {
  if (!Enabled()) return;
  Counters& counters = Process();
  MutexLock lock(&counters.mu);
  auto it = counters.collectives.find(name);
  if (it == counters.collectives.end()) {
    it = counters.collectives.emplace(std::string(name), Histogram()).first;
  }
  it->second.Add(latency);
}

void ConnectionOpened() { Process().connections.fetch_add(1, std::memory_order_relaxed); }
void ConnectionClosed() { Process().connections.fetch_sub(1, std::memory_order_relaxed); }

MetricsSnapshot Snapshot() {
  Counters& counters = Process();
  MetricsSnapshot snapshot;
  snapshot.enabled = Enabled();
  snapshot.connect_retries = counters.retries.load(std::memory_order_relaxed);
  snapshot.open_connections = counters.connections.load(std::memory_order_relaxed);
  MutexLock lock(&counters.mu);
  auto copy = [](const std::map<std::string, Calls, std::less<>>& from,
                 std::map<std::string, CallStats>* to) {
    for (const auto& [name, calls] : from) {
      (*to)[name] = CallStats{calls.calls, calls.errors, calls.bytes, calls.latency.Stats()};
    }
  };
  copy(counters.out, &snapshot.calls_out);
  copy(counters.in, &snapshot.calls_in);
  snapshot.errors_by_code = counters.errors;
  for (const auto& [name, histogram] : counters.collectives) {
    snapshot.collectives[name] = histogram.Stats();
  }
  return snapshot;
}

void Reset() {
  internal::enabled.store(false, std::memory_order_relaxed);
  Counters& counters = Process();
  MutexLock lock(&counters.mu);
  counters.out.clear();
  counters.in.clear();
  counters.errors.clear();
  counters.collectives.clear();
  counters.retries.store(0);
}

std::string MetricsSnapshot::Summary(const std::string& worker) const {
  auto totals = [](const std::map<std::string, CallStats>& table) {
    CallStats sum;
    for (const auto& [name, stats] : table) {
      sum.calls += stats.calls;
      sum.errors += stats.errors;
      sum.bytes += stats.bytes;
    }
    return sum;
  };
  // The functions that took the most time, busiest first.
  auto busiest = [](const std::map<std::string, CallStats>& table) {
    std::vector<std::pair<std::string, const CallStats*>> rows;
    for (const auto& [name, stats] : table) rows.emplace_back(name, &stats);
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
      return a.second->latency.total > b.second->latency.total;
    });
    if (rows.size() > 3) rows.resize(3);
    std::vector<std::string> parts;
    for (const auto& [name, stats] : rows) {
      parts.push_back(absl::StrCat(name, " ", stats->calls, "× p50 ", Ms(stats->latency.p50),
                                   " p99 ", Ms(stats->latency.p99)));
    }
    return absl::StrJoin(parts, ", ");
  };
  const CallStats out = totals(calls_out);
  const CallStats in = totals(calls_in);
  std::string line =
      absl::StrCat("metrics ", worker, ": calls out ", out.calls, " (", out.bytes, " B, ",
                   out.errors, " failed) [", busiest(calls_out), "]; calls in ", in.calls, " (",
                   in.bytes, " B, ", in.errors, " failed) [", busiest(calls_in), "]");
  if (!errors_by_code.empty()) {
    absl::StrAppend(&line, "; errors ",
                    absl::StrJoin(errors_by_code, " ", absl::PairFormatter("=")));
  }
  absl::StrAppend(&line, "; connect retries ", connect_retries, "; open connections ",
                  open_connections);
  for (const auto& [name, stats] : collectives) {
    absl::StrAppend(&line, "; ", name, " ", stats.count, "× total ", Ms(stats.total), " p50 ",
                    Ms(stats.p50));
  }
  return line;
}

}  // namespace tessera::metrics
