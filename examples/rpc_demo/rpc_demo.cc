// RPC demo: three worker processes move tensors over Tessera RPC, with the
// runtime alone (no RRefs or distributed autograd: see tessera/worker.h).
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/rpc_demo/rpc_demo
// (one command line; a backslash would end a // comment's line in C++).
//
// worker0 splits a matrix-vector product across
// worker1 and worker2 (asynchronous calls), checks the result against a local
// computation, runs a nested call chain worker0 -> worker1 -> worker2, shows
// a remote error, and reports timings. Then all shut down gracefully.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "examples/common/example_main.h"
#include "rpc/init.h"
#include "rpc/runtime.h"

namespace {

using tessera::Future;
using tessera::rpc::CallContext;
using tessera::rpc::Runtime;

void RegisterFunctions(Runtime& runtime) {
  runtime.Register("matvec", [](at::Tensor rows, at::Tensor v) { return at::matmul(rows, v); });
  runtime.Register(
      "relay",
      [](CallContext& ctx, std::vector<std::string> hops, at::Tensor t) -> Future<at::Tensor> {
        if (hops.empty()) return Future<at::Tensor>::Ready(t * 2);
        std::string next = hops.front();
        hops.erase(hops.begin());
        return ctx.runtime->RpcAsync<at::Tensor>(next, "relay", hops, t);
      });
  runtime.Register("checked_sqrt", [](double x) -> absl::StatusOr<double> {
    if (x < 0) return absl::InvalidArgumentError("sqrt of a negative number");
    return std::sqrt(x);
  });
}

int Drive(Runtime& rt) {
  std::printf("[worker0] world: ");
  for (const auto& w : rt.workers()) std::printf("%s(rank %d) ", w.name.c_str(), w.rank);
  std::printf("\n");

  at::Tensor matrix = at::randn({2048, 1024});
  at::Tensor vector = at::randn({1024});
  auto start = std::chrono::steady_clock::now();
  auto top = rt.RpcAsync<at::Tensor>("worker1", "matvec", matrix.narrow(0, 0, 1024), vector);
  auto bottom = rt.RpcAsync<at::Tensor>("worker2", "matvec", matrix.narrow(0, 1024, 1024), vector);
  at::Tensor upper = top.Get(absl::Seconds(30));
  at::Tensor lower = bottom.Get(absl::Seconds(30));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  at::Tensor distributed = at::cat({upper, lower});
  bool same = at::allclose(distributed, at::matmul(matrix, vector), 1e-4, 1e-4);
  std::printf("[worker0] sent two 1024x1024 float blocks (8 MiB) to worker1 and worker2; "
              "matvec came back in %.2f ms; matches local result: %s\n",
              ms, same ? "yes" : "NO");

  at::Tensor relayed = rt.RpcSync<at::Tensor>(
      "worker1", "relay", std::vector<std::string>{"worker2", "worker0"}, at::ones({3}));
  std::printf("[worker0] relay worker0 -> worker1 -> worker2 -> worker0 returned %s\n",
              relayed.sum().item<float>() == 6.0f ? "[2, 2, 2] (doubled at the end)" : "WRONG");

  constexpr int kCalls = 2000;
  std::vector<Future<double>> calls;
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kCalls; ++i) {
    calls.push_back(rt.RpcAsync<double>(i % 2 ? "worker1" : "worker2", "checked_sqrt",
                                        static_cast<double>(i)));
  }
  for (auto& c : calls) c.Get(absl::Seconds(30));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[worker0] %d async calls in %.3f s (%.0f calls/s)\n", kCalls, secs, kCalls / secs);

  auto error = rt.RpcAsync<double>("worker2", "checked_sqrt", -1.0).Wait(absl::Seconds(10));
  std::printf("[worker0] a remote error arrives as a status: %s\n",
              error.status().ToString().c_str());
  return same ? 0 : 1;
}

int RunWorker() {
  const auto options = tessera::rpc::RpcOptions::FromEnv();
  if (options.world_size != 3) {
    std::fprintf(stderr, "rpc_demo: runs as 3 workers: tessera-run --nproc_per_node 3\n");
    return 2;
  }
  auto runtime = tessera::rpc::Init(options);
  RegisterFunctions(*runtime);  // calls that arrive first wait for it
  const int code = options.rank == 0 ? Drive(*runtime) : 0;
  runtime->Shutdown();
  std::printf("[%s] shut down gracefully\n", options.name.c_str());
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::examples::ExampleMain(argc, argv,
                                        "RPC demo: three workers move tensors over Tessera RPC; "
                                        "run it with tessera-run --standalone --nproc_per_node 3.",
                                        [](const std::string&) { return RunWorker(); });
}
