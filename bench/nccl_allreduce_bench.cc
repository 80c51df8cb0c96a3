// Allreduce over Tessera's NCCL process group: one rank per visible GPU
// (NCCL refuses two ranks on one device), the others re-executions of this
// program (bench/two_processes.h). CPU tensors, as this LibTorch is a CPU
// build: each allreduce stages the tensor to the device and back, so at one
// rank the figure is the staging's bandwidth (bytes / time). Prints the
// JSON of bench/allreduce_timing.h.
//   nccl_allreduce_bench [world_size]   (default: every visible GPU)
// Compare with bench/torch_nccl_allreduce_bench.py in the same run
// (scripts/gpu/nccl_checks.sh runs both). Built only where CUDA is (manual).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench/allreduce_timing.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "collectives/nccl/nccl_process_group.h"
#include "store/store_client.h"

namespace {

int RunRank(int rank, int port, const std::vector<std::string>& args) {
  const int world = args.empty() ? tessera::collectives::VisibleCudaDevices() : std::stoi(args[0]);
  tessera::store::StoreClient store("127.0.0.1", port, absl::Seconds(60),
                                    tessera::bench::BenchJobSecret());
  std::unique_ptr<tessera::collectives::ProcessGroup> group;
  try {
    group = tessera::collectives::CreateNcclProcessGroup(&store, rank, world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  const std::string json = tessera::bench::TimeAllreduce(*group, rank, world);
  if (json.empty()) return 1;
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: nccl_allreduce_bench [WORLD_SIZE]\n"
    "Allreduce through the NCCL process group, one process per GPU (default: every visible\n"
    "GPU); prints JSON: per size, the median time and the bus bandwidth.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  const bool given = argc > 1 && std::strcmp(argv[1], "--rank") != 0;
  const int world = given ? std::atoi(argv[1]) : tessera::collectives::VisibleCudaDevices();
  if (world < 1) {
    std::fprintf(stderr, "nccl_allreduce_bench: no GPU visible\n");
    return 1;
  }
  return tessera::bench::RunProcesses(argc, argv, world, RunRank);
}
