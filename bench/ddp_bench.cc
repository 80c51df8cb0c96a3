// DDP step-time benchmark: a 4-layer MLP (1024 wide, ~16 MB of gradients),
// batch 64, one thread per process, world size 2, for bucket sizes
// 1/5/25/100 MB. Each round is a local step on both ranks at once (a replica
// without DDP: the same computation competing for the same cores, no
// communication), then a DDP step. Interleaving keeps the pair within a
// second of each other, so the ratio survives this shared machine's speed
// drifting by tens of percent over a run. Rank 0 reports, per bucket size,
// the median local step, the median DDP step and the median of the rounds'
// DDP/local ratios minus one (the overhead), as JSON. bench/compare_ddp.sh
// runs the same with PyTorch's DDP (Gloo) in the same run. DDP_COMM_HOOK=fp16
// or bf16 sends the buckets compressed (ddp/comm_hook.h), as both scripts do;
// powersgd[:R] (Tessera only) PowerSGD at rank R.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/gloo_group.h"
#include "bench/median.h"
#include "bench/mlp.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "ddp/distributed_data_parallel.h"

namespace {

using tessera::bench::Median;

using Clock = std::chrono::steady_clock;
constexpr int kWarmUp = 2;
constexpr int kRounds = 15;

// One SGD step of `model` on (x, y), in milliseconds.
struct Stepper {
  explicit Stepper(std::shared_ptr<torch::nn::SequentialImpl> m)
      : model(std::move(m)), optimizer(model->parameters(), 0.01) {}
  double Step(const torch::Tensor& x, const torch::Tensor& y) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  }
  std::shared_ptr<torch::nn::SequentialImpl> model;
  torch::optim::SGD optimizer;
};

// DDP_COMM_HOOK: allreduce (default), fp16, bf16, powersgd[:R].
std::shared_ptr<tessera::ddp::CommHook> CommHookFromEnv() {
  const char* hook = std::getenv("DDP_COMM_HOOK");
  auto named = tessera::ddp::CommHookNamed(hook == nullptr || *hook == 0 ? "allreduce" : hook);
  if (named == nullptr) {
    std::fprintf(stderr, "unknown DDP_COMM_HOOK '%s'\n", hook);
    std::exit(2);
  }
  return named;
}

int RunRank(int rank, int port, const std::vector<std::string>&) {
  torch::set_num_threads(1);
  auto connected = tessera::bench::ConnectGlooGroup(rank, port, 2);
  if (!connected.ok()) return 1;
  std::unique_ptr<tessera::collectives::ProcessGroup>& group = connected->group;
  const torch::Tensor x = torch::randn({64, 1024});
  const torch::Tensor y = torch::randn({64, 1024});
  std::string json;
  for (int mb : {1, 5, 25, 100}) {
    Stepper local(tessera::bench::Mlp1024());
    Stepper replicated(tessera::bench::Mlp1024());
    tessera::ddp::DdpOptions options;
    options.bucket_cap_mb = mb;
    options.comm_hook = CommHookFromEnv();
    auto ddp =
        tessera::ddp::DistributedDataParallel::Create(replicated.model, group.get(), options);
    std::vector<double> local_ms, ddp_ms, ratios;
    for (int round = 0; round < kWarmUp + kRounds; ++round) {
      const double l = local.Step(x, y);
      const double d = replicated.Step(x, y);
      if (round < kWarmUp) continue;
      local_ms.push_back(l);
      ddp_ms.push_back(d);
      ratios.push_back(d / l);
    }
    const std::string key = std::to_string(mb) + "mb";
    json += (json.empty() ? "{" : ", ") + ("\"local_" + key + "_ms\": ") +
            std::to_string(Median(local_ms)) + ", \"ddp_" + key +
            "_ms\": " + std::to_string(Median(ddp_ms)) + ", \"overhead_" + key +
            "\": " + std::to_string(Median(ratios) - 1);
  }
  json += "}";
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: ddp_bench\n"
    "DDP step time of a 4-layer MLP at world size 2 against a local step, per bucket size;\n"
    "prints JSON. DDP_COMM_HOOK=fp16|bf16|powersgd[:R] picks the hook. bench/compare_ddp.sh\n"
    "runs it beside PyTorch.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RunRank);
}
