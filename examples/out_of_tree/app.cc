// A program built outside Tessera's tree, against an installed Tessera
// (CMake: find_package(Tessera), pkg-config, or Bazel: @tessera). Two
// workers: worker0 calls worker1's "scale" over RPC, makes a tensor that
// lives on worker1 (an RRef), hands the reference back to worker1 (a fork)
// and fetches its value.
//
//   tessera-run --standalone --nproc_per_node 2 ./app
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>

#include <cstdio>

#include "tessera/worker.h"

using tessera::rref::RRef;

int main() try {
  auto worker = tessera::Worker::Start(tessera::WorkerOptions::FromEnv());
  worker->Register("scale", [](at::Tensor t, double by) { return t * by; });
  worker->Register("sum", [](RRef<at::Tensor> t) { return t.to_here().sum().item<double>(); });
  int code = 0;
  if (worker->rank() == 0) {
    const at::Tensor x = at::arange(4, at::kFloat);  // 0 1 2 3
    const at::Tensor scaled = worker->RpcSync<at::Tensor>("worker1", "scale", x, 2.0);
    RRef<at::Tensor> remote = worker->Remote<at::Tensor>("worker1", "scale", x, 3.0);
    const double sum = worker->RpcSync<double>("worker1", "sum", remote);  // 18
    const bool right = at::allclose(scaled, x * 2) && at::allclose(remote.to_here(), x * 3) &&
                       sum == 18.0;
    std::printf("out-of-tree app: rpc %s, rref sum %.0f on worker1: %s\n",
                at::allclose(scaled, x * 2) ? "ok" : "WRONG", sum, right ? "ok" : "WRONG");
    code = right ? 0 : 1;
  }
  worker->Shutdown();
  return code;
} catch (const tessera::StatusError& e) {
  std::fprintf(stderr, "out-of-tree app: %s\n", e.what());
  return 1;
}
