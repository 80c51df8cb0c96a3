// Allreduce benchmark: processes on loopback, Tessera's Gloo process group.
// Prints one JSON object: for each size in bytes, the median time in µs and
// the bus bandwidth in GB/s (bench/allreduce_timing.h).
//   allreduce_bench [world_size [bcube_min_bytes bcube_max_bytes]]
// (defaults: 2 ranks, GlooOptions' thresholds). With
// TESSERA_DISTRIBUTED_DEBUG=DETAIL the group is checked
// (collectives/collective_checks.h), to measure what the checks cost.
// Run through bench/compare_allreduce.sh to compare with PyTorch.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/allreduce_timing.h"
#include "bench/gloo_group.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "collectives/collective_checks.h"

namespace {

int RunRank(int rank, int port, const std::vector<std::string>& args) {
  const int world = args.empty() ? 2 : std::stoi(args[0]);
  tessera::collectives::GlooOptions options;
  if (args.size() > 2) {
    options.bcube_min_bytes = std::stoull(args[1]);
    options.bcube_max_bytes = std::stoull(args[2]);
  }
  auto connected = tessera::bench::ConnectGlooGroup(rank, port, world, options);
  auto checked = tessera::collectives::CollectiveChecksFromEnv();
  if (!connected.ok() || !checked.ok()) return 1;
  std::unique_ptr<tessera::collectives::ProcessGroup>& group = connected->group;
  if (*checked)
    group = tessera::collectives::WithCollectiveChecks(std::move(group), options.timeout);
  const std::string json = tessera::bench::TimeAllreduce(*group, rank, world);
  if (json.empty()) return 1;
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: allreduce_bench [WORLD_SIZE [BCUBE_MIN_BYTES BCUBE_MAX_BYTES]]\n"
    "Allreduce through Tessera's Gloo process group on loopback (default 2 ranks); prints JSON:\n"
    "per size, the median time in microseconds and the bus bandwidth. bench/compare_allreduce.sh\n"
    "runs it beside PyTorch.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const int world = argc > 1 && std::strcmp(argv[1], "--rank") != 0 ? std::atoi(argv[1]) : 2;
  return tessera::bench::RunProcesses(argc, argv, world, RunRank);
}
