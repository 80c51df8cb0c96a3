// ZeroRedundancyOptimizer vs a plain optimizer under DDP, world size 2, one
// thread per process: a 4-layer 1024-wide MLP (4.2 M parameters), batch
// 64, Adam. Each round is a DDP + Adam step, then a DDP + ZeRO(Adam) step on
// a second replica, interleaved so that the machine's drift hits both.
// A third replica steps with overlap_with_ddp (ZeRO's steps in DDP's hook).
// Rank 0 prints JSON: the median step of each, the median ratio, and the
// bytes of Adam's state (its moment tensors) each rank holds with each.
// bench/compare_zero.sh runs the same with PyTorch's ZeroRedundancyOptimizer.
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gloo_group.h"
#include "bench/median.h"
#include "bench/mlp.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/zero_redundancy_optimizer.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kWarmUp = 2;
constexpr int kRounds = 15;

std::unique_ptr<torch::optim::Optimizer> Adam(std::vector<at::Tensor> params) {
  return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(1e-3));
}

// Bytes of the moment tensors an Adam holds.
int64_t AdamStateBytes(const torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (const auto& [key, state] : optimizer.state()) {
    const auto& adam = static_cast<const torch::optim::AdamParamState&>(*state);
    bytes += adam.exp_avg().nbytes() + adam.exp_avg_sq().nbytes();
  }
  return bytes;
}

template <typename Step>
double Timed(Step step) {
  const auto start = Clock::now();
  step();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int RunRank(int rank, int port, const std::vector<std::string>&) {
  torch::set_num_threads(1);
  auto connected = tessera::bench::ConnectGlooGroup(rank, port, 2);
  if (!connected.ok()) return 1;
  tessera::collectives::ProcessGroup* group = connected->group.get();
  const torch::Tensor x = torch::randn({64, 1024}), y = torch::randn({64, 1024});
  auto plain_model = tessera::bench::Mlp1024(), zero_model = tessera::bench::Mlp1024(),
       overlap_model = tessera::bench::Mlp1024();
  auto plain_ddp = tessera::ddp::DistributedDataParallel::Create(plain_model, group);
  auto zero_ddp = tessera::ddp::DistributedDataParallel::Create(zero_model, group);
  auto plain = Adam(plain_model->parameters());
  tessera::ddp::ZeroRedundancyOptimizer zero(zero_model->parameters(), group, Adam);
  tessera::ddp::ZeroOptions overlap_options;
  overlap_options.overlap_with_ddp = true;
  tessera::ddp::ZeroRedundancyOptimizer overlap(overlap_model->parameters(), group, Adam,
                                                overlap_options);
  tessera::ddp::DdpOptions hooked;
  hooked.comm_hook = overlap.OverlapHook();
  auto overlap_ddp = tessera::ddp::DistributedDataParallel::Create(overlap_model, group, hooked);
  std::vector<double> plain_ms, zero_ms, overlap_ms, ratios, overlap_ratios;
  for (int round = 0; round < kWarmUp + kRounds; ++round) {
    const double p = Timed([&] {
      plain->zero_grad();
      torch::mse_loss(plain_model->forward(x), y).backward();
      plain->step();
    });
    const double z = Timed([&] {
      zero.ZeroGrad();
      torch::mse_loss(zero_model->forward(x), y).backward();
      zero.Step();
    });
    const double o = Timed([&] {
      overlap.ZeroGrad();
      torch::mse_loss(overlap_model->forward(x), y).backward();
      overlap.Step();
    });
    if (round < kWarmUp) continue;
    plain_ms.push_back(p);
    zero_ms.push_back(z);
    overlap_ms.push_back(o);
    ratios.push_back(z / p);
    overlap_ratios.push_back(o / p);
  }
  using tessera::bench::Median;
  if (rank == 0) {
    std::printf(
        "{\"adam_ms\": %f, \"zero_ms\": %f, \"ratio\": %f, \"overlap_ms\": %f, "
        "\"overlap_ratio\": %f, \"adam_state_bytes\": %lld, \"zero_state_bytes\": %lld}\n",
        Median(plain_ms), Median(zero_ms), Median(ratios), Median(overlap_ms),
        Median(overlap_ratios), static_cast<long long>(AdamStateBytes(*plain)),
        static_cast<long long>(AdamStateBytes(zero.local_optimizer())));
  }
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: zero_bench\n"
    "ZeroRedundancyOptimizer against a plain optimizer under DDP at world size 2; prints JSON.\n"
    "bench/compare_zero.sh runs it beside PyTorch.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RunRank);
}
