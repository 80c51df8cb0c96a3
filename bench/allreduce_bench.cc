// Allreduce benchmark: processes on loopback, Tessera's Gloo process group.
// Prints one JSON object: for each size in bytes, the median time in µs and
// the bus bandwidth in GB/s (2 (n-1)/n x size / time).
//   allreduce_bench [world_size [bcube_min_bytes bcube_max_bytes]]
// (defaults: 2 ranks, GlooOptions' thresholds). With
// TESSERA_DISTRIBUTED_DEBUG=DETAIL the group is checked
// (ddp/collective_checks.h), to measure what the checks cost.
// Run through bench/compare_allreduce.sh to compare with PyTorch.
#include <ATen/ops/ones.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/collective_checks.h"
#include "ddp/env_rendezvous.h"
#include "bench/gloo_group.h"
#include "bench/two_processes.h"

namespace {

using Clock = std::chrono::steady_clock;

// ALLREDUCE_SIZES (comma-separated bytes) and ALLREDUCE_ITERATIONS narrow a
// run to what is being investigated, and ALLREDUCE_QUARTILES=1 prints each
// size's spread to stderr; bench/torch_allreduce_bench.py reads the same
// variables.
std::vector<int64_t> Sizes() {
  const char* env = std::getenv("ALLREDUCE_SIZES");
  if (env == nullptr) {
    return {4, 4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20, 256 << 20};
  }
  std::vector<int64_t> sizes;
  std::istringstream list(env);
  for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::stoll(item));
  return sizes;
}

int Iterations(int64_t bytes) {
  if (const char* env = std::getenv("ALLREDUCE_ITERATIONS")) return std::max(1, std::atoi(env));
  return bytes >= (64 << 20) ? 5 : bytes >= (4 << 20) ? 20 : 200;
}

int RunRank(int rank, int port, const std::vector<std::string>& args) {
  const int world = args.empty() ? 2 : std::stoi(args[0]);
  tessera::ddp::GlooOptions options;
  if (args.size() > 2) {
    options.bcube_min_bytes = std::stoull(args[1]);
    options.bcube_max_bytes = std::stoull(args[2]);
  }
  auto connected = tessera::bench::ConnectGlooGroup(rank, port, world, options);
  auto checked = tessera::ddp::CollectiveChecksFromEnv();
  if (!connected.ok() || !checked.ok()) return 1;
  std::unique_ptr<tessera::ddp::ProcessGroup>& group = connected->group;
  if (*checked) group = tessera::ddp::WithCollectiveChecks(std::move(group), options.timeout);
  std::string json = "{";
  for (int64_t bytes : Sizes()) {
    at::Tensor t = at::ones({bytes / 4});
    (void)group->Allreduce(t).Wait(absl::Seconds(120));
    std::vector<double> us;
    for (int i = 0; i < Iterations(bytes); ++i) {
      (void)group->Barrier().Wait(absl::Seconds(60));
      const auto start = Clock::now();
      (void)group->Allreduce(t).Wait(absl::Seconds(120));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
    std::sort(us.begin(), us.end());
    const double median = us[us.size() / 2];
    if (rank == 0 && std::getenv("ALLREDUCE_QUARTILES") != nullptr) {
      std::fprintf(stderr, "%lld bytes: p25 %.0f p50 %.0f p75 %.0f p90 %.0f us\n",
                   static_cast<long long>(bytes), us[us.size() / 4], median,
                   us[us.size() * 3 / 4], us[us.size() * 9 / 10]);
    }
    const double busbw = 2.0 * (world - 1) / world * bytes / (median * 1e-6) / 1e9;
    json += (json.size() > 1 ? ", " : "") + std::string("\"") + std::to_string(bytes) +
            "\": [" + std::to_string(median) + ", " + std::to_string(busbw) + "]";
  }
  json += "}";
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int world = argc > 1 && std::strcmp(argv[1], "--rank") != 0 ? std::atoi(argv[1]) : 2;
  return tessera::bench::RunProcesses(argc, argv, world, RunRank);
}
