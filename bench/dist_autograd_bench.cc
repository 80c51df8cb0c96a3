// Distributed autograd benchmark: three processes on loopback. Prints one
// JSON object:
//   backward_local_us       p50 of a local backward through 8 stages y = y * w
//   backward_dist_us        p50 of dist_autograd Backward when each stage is
//                           an RPC to worker1 (16 send/recv edges: request
//                           and response of each call)
//   overhead_per_edge_us    (backward_dist_us - backward_local_us) / edges
//   ps_<model>_updates_per_s  parameter-server training: worker0 holds the
//                           model, worker1 and worker2 each run forward
//                           through it, Backward and a DistributedOptimizer
//                           (Adam) step, batch 64 of random data; steps of
//                           both trainers per second of wall time.
//                           Models: mlp (784-128-10), cnn (the example's).
// Run through bench/compare_dist_autograd.sh to compare with PyTorch.
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linear.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/relu.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <vector>

#include "bench/median.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "bench/worker_options.h"
#include "common/status.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"
#include "dist_optim/parameter_guard.h"
#include "examples/common/cnn.h"
#include "rpc/init.h"
#include "rref/remote.h"

namespace {

using tessera::bench::Median;

using Clock = std::chrono::steady_clock;
using namespace tessera;

constexpr int kStages = 8;
constexpr int kWidth = 64;
constexpr int kBatch = 64;

double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

// A model held by the parameter server: parameters and a forward function.
struct Model {
  std::vector<at::Tensor> params;
  at::Tensor (*forward)(const std::vector<at::Tensor>&, const at::Tensor&);
  std::vector<int64_t> input_shape;
};

at::Tensor MlpForward(const std::vector<at::Tensor>& p, const at::Tensor& x) {
  return at::linear(at::relu(at::linear(x.flatten(1), p[0], p[1])), p[2], p[3]);
}

std::map<std::string, Model> MakeModels() {
  at::manual_seed(0);
  std::vector<at::Tensor> mlp = {at::randn({128, 784}) * 0.03, at::zeros({128}),
                                 at::randn({10, 128}) * 0.08, at::zeros({10})};
  for (auto& p : mlp) p.set_requires_grad(true);
  return {{"mlp", {mlp, MlpForward, {kBatch, 784}}},
          {"cnn", {examples::InitCnn(0), examples::CnnForward, {kBatch, 1, 28, 28}}}};
}

struct Worker {
  std::shared_ptr<rref::RRefContext> rrefs;
  std::shared_ptr<dist_autograd::DistAutograd> autograd;
  std::unique_ptr<rpc::Runtime> runtime;
};

// Trainer loop (runs on worker1/worker2 when worker0 asks): seconds for
// `steps` timed steps after a warm-up.
double Train(Worker& w, const std::string& model, int64_t steps) {
  auto params =
      w.runtime->RpcSync<std::vector<rref::RRef<at::Tensor>>>("worker0", "params", model);
  dist_optim::AdamOptions adam;
  auto optimizer = dist_optim::DistributedOptimizer::Create(*w.rrefs, params, adam);
  const std::vector<int64_t> shape =
      model == "mlp" ? std::vector<int64_t>{kBatch, 784} : std::vector<int64_t>{kBatch, 1, 28, 28};
  at::Tensor x = at::randn(shape), y = at::randint(0, 10, {kBatch});
  auto step = [&] {
    dist_autograd::ContextGuard context(*w.autograd);
    at::Tensor out = w.runtime->RpcSync<at::Tensor>("worker0", "forward", model, x);
    w.autograd->Backward(context.id(), {at::cross_entropy_loss(out, y)});
    optimizer.Step(context.id());
  };
  for (int i = 0; i < 5; ++i) step();
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Starts worker `rank` into `w` (which must outlive its runtime).
void Start(int rank, int port, std::shared_ptr<std::map<std::string, Model>> models, Worker& w) {
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  w.rrefs = rref::RRefContext::Create(std::move(classes));
  w.autograd = dist_autograd::DistAutograd::Create();
  rpc::Registry registry;
  at::Tensor scale = at::full({1, kWidth}, 1.001).set_requires_grad(true);
  registry.Register("scale", [scale](at::Tensor x) { return x * scale; });
  registry.Register("params", [models](rpc::CallContext& ctx, std::string name) {
    return rref::MakeRRefs(ctx, models->at(name).params);
  });
  registry.Register("forward", [models](std::string name, at::Tensor x) {
    const Model& model = models->at(name);
    std::vector<at::Tensor> snapshot;
    {
      dist_optim::ParameterGuard guard(model.params);
      for (const auto& p : model.params) snapshot.push_back(p.clone());
    }
    return model.forward(snapshot, x);
  });
  // Trainers train when worker0 asks them to.
  Worker* worker = &w;
  registry.Register(
      "train", [worker](std::string model, int64_t steps) { return Train(*worker, model, steps); });
  w.runtime =
      rpc::Init(bench::WorkerOptions(rank, 3, port), std::move(registry), {w.rrefs, w.autograd});
}

std::map<std::string, double> EdgeOverhead(Worker& w) {
  at::Tensor x = at::randn({1, kWidth}).set_requires_grad(true);
  at::Tensor scale = at::full({1, kWidth}, 1.001).set_requires_grad(true);
  std::vector<double> local, dist;
  for (int i = 0; i < 300; ++i) {
    at::Tensor y = x;
    for (int k = 0; k < kStages; ++k) y = y * scale;
    const auto start = Clock::now();
    torch::autograd::backward({y.sum()});
    local.push_back(Micros(Clock::now() - start));
  }
  for (int i = 0; i < 300; ++i) {
    dist_autograd::ContextGuard context(*w.autograd);
    at::Tensor y = x;
    for (int k = 0; k < kStages; ++k) y = w.runtime->RpcSync<at::Tensor>("worker1", "scale", y);
    at::Tensor loss = y.sum();
    const auto start = Clock::now();
    w.autograd->Backward(context.id(), {loss});
    dist.push_back(Micros(Clock::now() - start));
  }
  const double l = Median(local), d = Median(dist);
  return {{"backward_local_us", l},
          {"backward_dist_us", d},
          {"edges", 2.0 * kStages},
          {"overhead_per_edge_us", (d - l) / (2.0 * kStages)}};
}

int RankMain(int rank, int port, const std::vector<std::string>&) {
  at::set_num_threads(1);
  auto models = std::make_shared<std::map<std::string, Model>>(MakeModels());
  Worker w;
  Start(rank, port, models, w);
  if (rank == 0) {
    auto results = EdgeOverhead(w);
    for (const auto& [model, steps] : std::map<std::string, int64_t>{{"mlp", 300}, {"cnn", 40}}) {
      auto a = w.runtime->RpcAsync<double>("worker1", "train", model, steps);
      auto b = w.runtime->RpcAsync<double>("worker2", "train", model, steps);
      const double seconds = std::max(ValueOrThrow(a.Wait(absl::Minutes(10))),
                                      ValueOrThrow(b.Wait(absl::Minutes(10))));
      results["ps_" + model + "_updates_per_s"] = 2.0 * static_cast<double>(steps) / seconds;
    }
    std::printf("{");
    const char* sep = "";
    for (const auto& [key, value] : results) {
      std::printf("%s\"%s\": %.1f", sep, key.c_str(), value);
      sep = ", ";
    }
    std::printf("}\n");
  }
  w.runtime->Shutdown();
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: dist_autograd_bench\n"
    "Distributed autograd over three processes on loopback: backward through RPC stages and\n"
    "parameter-server updates per second; prints JSON. bench/compare_dist_autograd.sh runs it\n"
    "beside PyTorch.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunProcesses(argc, argv, 3, RankMain);
}
