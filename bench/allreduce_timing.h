// The timed loop of the allreduce benchmarks (bench/allreduce_bench.cc over
// Gloo, bench/nccl_allreduce_bench.cc over NCCL): for each size, a warm-up,
// then barrier + allreduce repeated; one JSON object of
// {"bytes": [median µs, bus bandwidth GB/s (2 (n-1)/n x size / time)]}.
//
// ALLREDUCE_SIZES (comma-separated bytes) and ALLREDUCE_ITERATIONS narrow a
// run to what is being investigated, and ALLREDUCE_QUARTILES=1 prints each
// size's spread to stderr; the PyTorch scripts beside read the same
// variables.
#pragma once

#include <ATen/ops/ones.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/process_group.h"

namespace tessera::bench {

inline std::vector<int64_t> AllreduceSizes() {
  const char* env = std::getenv("ALLREDUCE_SIZES");
  if (env == nullptr) {
    return {4, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20, 256 << 20};
  }
  std::vector<int64_t> sizes;
  std::istringstream list(env);
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::stoll(item));
  return sizes;
}

inline int AllreduceIterations(int64_t bytes) {
  if (const char* env = std::getenv("ALLREDUCE_ITERATIONS")) return std::max(1, std::atoi(env));
  return bytes >= (64 << 20) ? 5 : bytes >= (4 << 20) ? 20 : 200;
}

// Runs the loop on every rank; returns the JSON object (every rank builds
// it; the caller prints rank 0's). An operation that fails ends the run with
// its status printed to stderr and an empty string returned.
inline std::string TimeAllreduce(collectives::ProcessGroup& group, int rank, int world) {
  using Clock = std::chrono::steady_clock;
  std::string json = "{";
  for (int64_t bytes : AllreduceSizes()) {
    at::Tensor t = at::ones({bytes / 4});
    if (auto warm = group.Allreduce(t).Wait(absl::Seconds(120)); !warm.ok()) {
      std::fprintf(stderr, "rank %d: allreduce of %lld bytes: %s\n", rank,
                   static_cast<long long>(bytes), warm.status().ToString().c_str());
      return "";
    }
    std::vector<double> us;
    for (int i = 0; i < AllreduceIterations(bytes); ++i) {
      (void)group.Barrier().Wait(absl::Seconds(60));
      const auto start = Clock::now();
      (void)group.Allreduce(t).Wait(absl::Seconds(120));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    std::sort(us.begin(), us.end());
    const double median = us[us.size() / 2];
    if (rank == 0 && std::getenv("ALLREDUCE_QUARTILES") != nullptr) {
      std::fprintf(stderr, "%lld bytes: p25 %.0f p50 %.0f p75 %.0f p90 %.0f us\n",
                   static_cast<long long>(bytes), us[us.size() / 4], median,
                   us[us.size() * 3 / 4], us[us.size() * 9 / 10]);
    }
    const double busbw = world > 1 ? 2.0 * (world - 1) / world * bytes / (median * 1e-6) / 1e9
                                   : bytes / (median * 1e-6) / 1e9;
    json += (json.size() > 1 ? ", " : "") + std::string("\"") + std::to_string(bytes) +
            "\": [" + std::to_string(median) + ", " + std::to_string(busbw) + "]";
  }
  return json + "}";
}

}  // namespace tessera::bench
