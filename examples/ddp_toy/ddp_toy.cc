// The ToyModel of PyTorch's DDP tutorial, with its checkpoint pattern:
// train a few steps with DistributedDataParallel, save on rank 0, barrier,
// load on every rank, and check that all replicas agree.
//
//   bazel-bin/launcher/tessera-run --nproc_per_node 2 --standalone
//       bazel-bin/examples/ddp_toy/ddp_toy [checkpoint_path]
// (one command line; a backslash would end a // comment's line in C++).
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "ddp/distributed_data_parallel.h"
#include "ddp/gloo/gloo_process_group.h"

namespace {

std::shared_ptr<torch::nn::SequentialImpl> ToyModel() {
  return std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(10, 10), torch::nn::ReLU(), torch::nn::Linear(10, 5));
}

int Fail(const std::string& what) {
  std::fprintf(stderr, "ddp_toy: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string checkpoint = argc > 1 ? argv[1] : "/tmp/tessera_ddp_toy.pt";
  auto env = tessera::ddp::CreateGlooProcessGroupFromEnv();
  if (!env.ok()) return Fail(env.status().ToString());
  tessera::ddp::ProcessGroup* group = env->group.get();
  const int rank = group->rank();

  torch::manual_seed(rank);  // replicas start apart; DDP copies rank 0's
  auto model = ToyModel();
  auto ddp = tessera::ddp::DistributedDataParallel::Create(model, group);
  if (!ddp.ok()) return Fail(ddp.status().ToString());
  torch::optim::SGD optimizer(model->parameters(), 0.001);
  torch::manual_seed(100 + rank);  // each rank its own data
  for (int step = 0; step < 5; ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(torch::randn({20, 10})), torch::randn({20, 5}));
    loss.backward();
    optimizer.step();
    std::printf("step %d loss %.4f\n", step, loss.item<float>());
  }

  if (rank == 0) torch::save(model, checkpoint);
  if (!group->Barrier().Wait(absl::Seconds(60)).ok()) return Fail("barrier failed");
  auto restored = ToyModel();
  torch::load(restored, checkpoint);
  // Every replica equals the checkpoint: the averaged updates kept them equal.
  auto mine = model->parameters();
  auto saved = restored->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!torch::allclose(mine[i], saved[i])) return Fail("replica differs from the checkpoint");
  }
  std::printf("replica matches the checkpoint saved by rank 0\n");
  return 0;
}
