// SyncBatchNorm cost: forward + backward of a batch-norm layer at world size
// 2, one thread per process, against the same layer without
// synchronisation (LibTorch's BatchNorm2d — PyTorch's own CPU kernel; PyTorch
// 1.13's SyncBatchNorm refuses CPU tensors, so a CPU user of PyTorch has
// only the unsynchronised layer). Each round runs the local layer on both
// ranks, then the synchronised one (paired rounds, as bench/ddp_bench.cc),
// for a few activation shapes. Rank 0 prints JSON: per shape, the median
// local and synchronised times (µs), the median ratio, and the two
// collectives alone (µs).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/gloo_group.h"
#include "bench/median.h"
#include "bench/two_processes.h"
#include "bench/usage.h"
#include "ddp/sync_batch_norm.h"

namespace {

using tessera::bench::Median;

using Clock = std::chrono::steady_clock;
constexpr int kWarmUp = 5;
constexpr int kRounds = 60;

template <typename Layer>
double ForwardBackwardUs(Layer& layer, const torch::Tensor& x, const torch::Tensor& g) {
  const auto start = Clock::now();
  torch::Tensor input = x.detach().requires_grad_();
  (layer->forward(input) * g).sum().backward();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

// The two collectives SyncBatchNorm adds, alone: the forward's allgather
// of (count, mean, M2) and the backward's allreduce of two sums per channel.
double BareCollectivesUs(tessera::collectives::ProcessGroup& group, int64_t channels) {
  const auto start = Clock::now();
  torch::Tensor stats = torch::zeros({1 + 2 * channels});
  torch::Tensor all = torch::empty({2 * stats.numel()});
  torch::Tensor sums = torch::zeros({2 * channels});
  if (!group.Allgather(stats, all).Wait(absl::Seconds(60)).ok()) std::abort();
  if (!group.Allreduce(sums).Wait(absl::Seconds(60)).ok()) std::abort();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

int RunRank(int rank, int port, const std::vector<std::string>&) {
  torch::set_num_threads(1);
  auto connected = tessera::bench::ConnectGlooGroup(rank, port, 2);
  if (!connected.ok()) return 1;
  std::unique_ptr<tessera::collectives::ProcessGroup>& group = connected->group;
  std::string json;
  // (batch, channels, height, width) per rank: early, middle and late layers of a small CNN.
  for (const auto& shape :
       std::vector<std::vector<int64_t>>{{32, 16, 32, 32}, {32, 64, 16, 16}, {32, 256, 4, 4}}) {
    const int64_t channels = shape[1];
    torch::nn::BatchNorm2d local(channels);
    tessera::ddp::SyncBatchNorm synced(tessera::ddp::SyncBatchNormOptions(channels), group.get());
    const torch::Tensor x = torch::randn(shape);
    const torch::Tensor g = torch::randn(shape);
    std::vector<double> local_us, sync_us, ratios, bare_us;
    for (int round = 0; round < kWarmUp + kRounds; ++round) {
      const double l = ForwardBackwardUs(local, x, g);
      const double s = ForwardBackwardUs(synced, x, g);
      const double b = BareCollectivesUs(*group, channels);
      if (round < kWarmUp) continue;
      bare_us.push_back(b);
      local_us.push_back(l);
      sync_us.push_back(s);
      ratios.push_back(s / l);
    }
    const std::string key = std::to_string(shape[0]) + "x" + std::to_string(shape[1]) + "x" +
                            std::to_string(shape[2]) + "x" + std::to_string(shape[3]);
    json += (json.empty() ? "{" : ", ") + ("\"local_" + key + "_us\": ") +
            std::to_string(Median(local_us)) + ", \"sync_" + key +
            "_us\": " + std::to_string(Median(sync_us)) + ", \"ratio_" + key +
            "\": " + std::to_string(Median(ratios)) + ", \"collectives_" + key +
            "_us\": " + std::to_string(Median(bare_us));
  }
  json += "}";
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

constexpr char kUsage[] =
    "usage: sync_batch_norm_bench\n"
    "SyncBatchNorm forward + backward at world size 2 against the unsynchronised layer, per\n"
    "activation shape; prints JSON.\n";

int main(int argc, char** argv) {
  tessera::bench::ExitOnHelp(argc, argv, kUsage);
  return tessera::bench::RunTwoProcesses(argc, argv, RunRank);
}
