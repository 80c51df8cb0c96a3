// RPC benchmark: two processes on loopback (this process is the caller,
// a child serves). Prints one JSON object with:
//   rtt_p50_us / rtt_p99_us  round trip of a 1-float tensor echo
//   calls_per_s              echo throughput with 64 calls in flight
//   gbps_1mb / gbps_64mb     tensor echo bandwidth: 2 x size / round trip
//   gbps_64mb_shared         the same for a tensor in shared memory (see Note
//                            [Tensors in shared memory]): a handle travels
//                            and the callee maps the segment; only on the
//                            default same-host path, where that happens
// Flags: --grpc runs both workers on the gRPC agent (default TensorPipe);
// --same-host=unix|shm|tcp picks TensorPipe's same-host transport (default
// unix; tcp measures the cross-host path: TCP and the basic channel);
// --no-cma moves same-host tensors over the transport instead of cma.
// --calls-only runs only the calls/s phase, 5 times as long, and prints only
// calls_per_s (for profiling it: perf record -a during the run sees nothing
// else).
// Run through bench/compare_rpc.sh to compare with PyTorch in the same run.
#include <ATen/ops/ones.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "bench/two_processes.h"
#include "bench/usage.h"
#include "bench/worker_options.h"
#include "rpc/init.h"
#include "rpc/runtime.h"
#include "rpc/shared_tensors.h"

namespace {

using tessera::rpc::Runtime;
using Clock = std::chrono::steady_clock;

tessera::rpc::Registry MakeRegistry() {
  tessera::rpc::Registry registry;
  (void)registry.Register("echo", [](at::Tensor t) { return t; });
  return registry;
}

bool HasFlag(const std::vector<std::string>& args, const std::string& flag) {
  return std::find(args.begin(), args.end(), flag) != args.end();
}

std::unique_ptr<Runtime> Start(int rank, int port, const std::vector<std::string>& args) {
  tessera::rpc::RpcOptions options = tessera::bench::WorkerOptions(rank, 2, port);
  if (HasFlag(args, "--same-host=shm")) {
    options.tensorpipe.same_host = tessera::rpc::SameHostTransport::kSharedMemory;
  } else if (HasFlag(args, "--same-host=tcp")) {
    options.tensorpipe.same_host = tessera::rpc::SameHostTransport::kTcp;
  }
  options.tensorpipe.enable_cma = !HasFlag(args, "--no-cma");
  if (HasFlag(args, "--grpc")) options.backend = tessera::rpc::Backend::kGrpc;
  auto runtime = TryInit(options, MakeRegistry());
  if (!runtime.ok()) {
    std::fprintf(stderr, "init: %s\n", runtime.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(runtime);
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void Echo(Runtime& rt, const at::Tensor& t) {
  (void)rt.RpcSync<at::Tensor>("worker1", "echo", t);
}

double Bandwidth(Runtime& rt, int64_t bytes, int iterations, bool shared = false) {
  at::Tensor t = at::ones({bytes / 4});
  if (shared) t = tessera::rpc::ToSharedMemory(t);
  Echo(rt, t);
  auto start = Clock::now();
  for (int i = 0; i < iterations; ++i) Echo(rt, t);
  return 2.0 * bytes * iterations / Seconds(Clock::now() - start) / 1e9;
}

int RankMain(int rank, int port, const std::vector<std::string>& args) {
  auto rt = Start(rank, port, args);
  if (rank == 1) return rt->TryShutdown().ok() ? 0 : 1;

  at::Tensor one = at::ones({1});
  for (int i = 0; i < 500; ++i) Echo(*rt, one);
  const bool calls_only = HasFlag(args, "--calls-only");
  std::vector<double> rtts;
  for (int i = 0; i < 5000 && !calls_only; ++i) {
    auto start = Clock::now();
    Echo(*rt, one);
    rtts.push_back(Seconds(Clock::now() - start) * 1e6);
  }
  std::sort(rtts.begin(), rtts.end());

  constexpr int kWindow = 64;
  const int kCalls = calls_only ? 100000 : 20000;
  std::deque<tessera::Future<at::Tensor>> window;
  auto start = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    if (window.size() == kWindow) {
      (void)window.front().Wait(absl::Seconds(60));
      window.pop_front();
    }
    window.push_back(rt->RpcAsync<at::Tensor>("worker1", "echo", one));
  }
  for (auto& f : window) (void)f.Wait(absl::Seconds(60));
  const double calls_per_s = kCalls / Seconds(Clock::now() - start);
  if (calls_only) {
    std::printf("{\"calls_per_s\": %.0f}\n", calls_per_s);
    return rt->TryShutdown().ok() ? 0 : 1;
  }

  const double gbps_1mb = Bandwidth(*rt, 1 << 20, 500);
  const double gbps_64mb = Bandwidth(*rt, 64 << 20, 20);
  std::string shared;
  const bool default_path = !HasFlag(args, "--grpc") && !HasFlag(args, "--same-host=shm") &&
                            !HasFlag(args, "--same-host=tcp");
  if (default_path) {
    char field[64];
    std::snprintf(field, sizeof(field), ", \"gbps_64mb_shared\": %.2f",
                  Bandwidth(*rt, 64 << 20, 20, /*shared=*/true));
    shared = field;
  }
  std::printf(
      "{\"rtt_p50_us\": %.1f, \"rtt_p99_us\": %.1f, \"calls_per_s\": %.0f, "
      "\"gbps_1mb\": %.2f, \"gbps_64mb\": %.2f%s}\n",
      rtts[rtts.size() / 2], rtts[rtts.size() * 99 / 100], calls_per_s, gbps_1mb, gbps_64mb,
      shared.c_str());
  return rt->TryShutdown().ok() ? 0 : 1;
}

}  // namespace

constexpr char kUsage[] =
    "usage: rpc_bench [--grpc] [--same-host=unix|shm|tcp] [--no-cma] [--calls-only]\n"
    "RPC round trip, calls per second and echo bandwidth between two processes on loopback;\n"
    "prints JSON. bench/compare_rpc.sh runs it beside PyTorch and the transport floors.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RankMain);
}
