// DDP step-time benchmark: a 4-layer MLP (1024 wide, ~16 MB of gradients),
// batch 64, one thread per process. Rank 0 reports the median local step
// (one process, no communication) and the median DDP step at world size 2
// for bucket sizes 1/5/25/100 MB, as JSON. bench/compare_ddp.sh runs the
// same with PyTorch's DDP (Gloo) in the same run.
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.h"
#include "ddp/gloo/gloo_process_group.h"
#include "bench/two_processes.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSteps = 15;

std::shared_ptr<torch::nn::SequentialImpl> Mlp() {
  torch::manual_seed(0);
  return std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(1024, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 1024),
      torch::nn::ReLU(), torch::nn::Linear(1024, 1024), torch::nn::ReLU(),
      torch::nn::Linear(1024, 1024));
}

double MedianStepMs(const std::shared_ptr<torch::nn::SequentialImpl>& model) {
  torch::optim::SGD optimizer(model->parameters(), 0.01);
  const torch::Tensor x = torch::randn({64, 1024});
  const torch::Tensor y = torch::randn({64, 1024});
  std::vector<double> ms;
  for (int step = 0; step < kSteps + 2; ++step) {
    const auto start = Clock::now();
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    if (step >= 2) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int RunRank(int rank, int port, const std::vector<std::string>&) {
  torch::set_num_threads(1);
  tessera::store::StoreClient store("127.0.0.1", port);
  auto group = tessera::ddp::CreateGlooProcessGroup(&store, rank, 2);
  if (!group.ok()) return 1;
  std::string json = "{";
  if (rank == 0) {
    json += "\"local_ms\": " + std::to_string(MedianStepMs(Mlp()));
  }
  (void)(*group)->Barrier().Wait(absl::Seconds(300));  // rank 1 idle during the local run
  for (double mb : {1.0, 5.0, 25.0, 100.0}) {
    auto model = Mlp();
    tessera::ddp::DdpOptions options;
    options.bucket_cap_mb = mb;
    auto ddp = tessera::ddp::DistributedDataParallel::Create(model, group->get(), options);
    if (!ddp.ok()) return 1;
    const double ms = MedianStepMs(model);
    json += ", \"ddp_" + std::to_string(static_cast<int>(mb)) + "mb_ms\": " + std::to_string(ms);
  }
  json += "}";
  if (rank == 0) std::printf("%s\n", json.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tessera::bench::RunTwoProcesses(argc, argv, RunRank); }
