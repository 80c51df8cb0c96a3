// The ToyModel of PyTorch's DDP tutorial, with its checkpoint pattern:
// train a few steps with DistributedDataParallel, save on rank 0, barrier,
// load on every rank, and check that all replicas agree.
//
//   bazel-bin/launcher/tessera-run --nproc_per_node 2 --standalone
//       bazel-bin/examples/ddp_toy/ddp_toy --checkpoint /tmp/toy.pt
// (one command line; a backslash would end a // comment's line in C++).
// `ddp_toy --help` lists the flags.
#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <string>

#include "absl/flags/flag.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
#include "ddp/distributed_data_parallel.h"
#include "examples/common/example_main.h"

ABSL_FLAG(std::string, checkpoint, "/tmp/tessera_ddp_toy.pt",
          "where rank 0 saves the model for every rank to load");
ABSL_FLAG(int, steps, 5, "training steps before the checkpoint");

namespace {

std::shared_ptr<torch::nn::SequentialImpl> ToyModel() {
  return std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(10, 10), torch::nn::ReLU(), torch::nn::Linear(10, 5));
}

int Train() {
  const std::string checkpoint = absl::GetFlag(FLAGS_checkpoint);
  auto env = tessera::collectives::CreateGlooProcessGroupFromEnv();
  tessera::collectives::ProcessGroup* group = env.group.get();
  const int rank = group->rank();

  torch::manual_seed(rank);  // replicas start apart; DDP copies rank 0's
  auto model = ToyModel();
  auto ddp = tessera::ddp::DistributedDataParallel::Create(model, group);
  torch::optim::SGD optimizer(model->parameters(), 0.001);
  torch::manual_seed(100 + rank);  // each rank its own data
  for (int step = 0; step < absl::GetFlag(FLAGS_steps); ++step) {
    optimizer.zero_grad();
    auto loss = torch::mse_loss(model->forward(torch::randn({20, 10})), torch::randn({20, 5}));
    loss.backward();
    optimizer.step();
    std::printf("step %d loss %.4f\n", step, loss.item<float>());
  }

  if (rank == 0) torch::save(model, checkpoint);
  group->Barrier().Get(absl::Seconds(60));
  auto restored = ToyModel();
  torch::load(restored, checkpoint);
  // Every replica equals the checkpoint: the averaged updates kept them equal.
  auto mine = model->parameters();
  auto saved = restored->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!torch::allclose(mine[i], saved[i])) {
      throw tessera::StatusError(absl::InternalError("replica differs from the checkpoint"));
    }
  }
  std::printf("replica matches the checkpoint saved by rank 0\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::examples::ExampleMain(argc, argv,
                                        "The DDP tutorial's ToyModel with its checkpoint "
                                        "pattern; run it with tessera-run --nproc_per_node N.",
                                        [](const std::string&) { return Train(); });
}
