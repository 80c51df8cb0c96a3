// What an idle worker costs (issue 32): two processes on loopback; rank 0
// makes one call to worker1 (so every connection of a job is open), then
// both sit idle for N seconds (default 10). Prints the CPU seconds each
// process used in that window, as JSON:
//   {"idle_s": 10, "caller_cpu_s": ..., "callee_cpu_s": ...}
// TESSERA_TENSORPIPE_SAME_HOST picks the same-host transport to measure.
// Run through bench/same_host_transport.sh.
#include <ATen/ops/ones.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "bench/worker_options.h"
#include "common/process_cpu.h"
#include "rpc/init.h"
#include "rpc/runtime.h"

namespace {

using tessera::ProcessCpuSeconds;

int RankMain(int rank, int port, const std::vector<std::string>& args) {
  tessera::rpc::Registry registry;
  (void)registry.Register("echo", [](at::Tensor t) { return t; });
  (void)registry.Register("pid", [] { return static_cast<int64_t>(getpid()); });
  auto rt = TryInit(tessera::bench::WorkerOptions(rank, 2, port), std::move(registry));
  if (!rt.ok()) {
    std::fprintf(stderr, "init: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  if (rank == 1) return (*rt)->TryShutdown().ok() ? 0 : 1;
  const int seconds = args.empty() ? 10 : std::stoi(args[0]);
  (void)(*rt)->RpcSync<at::Tensor>("worker1", "echo", at::ones({1 << 20}));
  const auto callee = static_cast<pid_t>((*rt)->RpcSync<int64_t>("worker1", "pid"));
  const double caller_before = ProcessCpuSeconds(getpid());
  const double callee_before = ProcessCpuSeconds(callee);
  absl::SleepFor(absl::Seconds(seconds));
  std::printf("{\"idle_s\": %d, \"caller_cpu_s\": %.3f, \"callee_cpu_s\": %.3f}\n", seconds,
              ProcessCpuSeconds(getpid()) - caller_before, ProcessCpuSeconds(callee) - callee_before);
  return (*rt)->TryShutdown().ok() ? 0 : 1;
}

}  // namespace

constexpr char kUsage[] =
    "usage: idle_worker [SECONDS]\n"
    "One call between two workers, then both idle for SECONDS (default 10); prints the CPU\n"
    "seconds each used, as JSON. TESSERA_TENSORPIPE_SAME_HOST picks the same-host transport.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RankMain);
}
