// A ResNet-18 (resnet.h) trained data-parallel on Fashion-MNIST: each rank
// trains on its DistributedSampler shard, DistributedDataParallel averages
// the gradients over Gloo (batch-norm statistics broadcast from rank 0 each
// step, as PyTorch's broadcast_buffers), rank 0 reports each epoch's time
// and test accuracy. Run with 1 and with 2 processes for the speed-up.
//
//   bazel-bin/launcher/tessera-run --nproc_per_node 2 --standalone
//       bazel-bin/examples/resnet_ddp/resnet_ddp --epochs 1
// (one command line.)
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "collectives/gloo/gloo_process_group.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_sampler.h"
#include "examples/common/training.h"
#include "examples/resnet_ddp/resnet.h"

ABSL_FLAG(int64_t, width, 16, "channels of the first stage (the original ResNet-18: 64)");

namespace tessera::examples {
namespace {

double Accuracy(ResNet18& net, const data::Examples& test, int64_t count) {
  net->eval();
  const double accuracy =
      TestAccuracy(test, count, [&](const at::Tensor& images) { return net->forward(images); });
  net->train();
  return accuracy;
}

int Train(const TrainingFlags& flags) {
  const auto train = data::LoadFashionMnist(data::Split::kTrain);
  const auto test = data::LoadFashionMnist(data::Split::kTest);
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  collectives::ProcessGroup* group = env.group.get();
  const int rank = group->rank();
  const std::string who = rank == 0 ? "rank0" : "rank" + std::to_string(rank);

  torch::manual_seed(flags.seed);
  ResNet18 net(absl::GetFlag(FLAGS_width));
  int64_t parameters = 0;
  for (const auto& p : net->parameters()) parameters += p.numel();
  auto ddp = ddp::DistributedDataParallel::Create(net.ptr(), group);
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {group->size(), rank, /*shuffle=*/true, /*seed=*/1, false});
  if (rank == 0) {
    std::printf(
        "[rank0] ResNet-18, width %lld (%lld parameters), %d process(es), batch %lld "
        "per process\n",
        static_cast<long long>(absl::GetFlag(FLAGS_width)), static_cast<long long>(parameters),
        group->size(), static_cast<long long>(flags.batch));
  }
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    TrainingFlags one = flags;
    one.epochs = epoch + 1;
    EpochHooks hooks;
    hooks.start_epoch = epoch;
    const auto epoch_start = std::chrono::steady_clock::now();
    const double throughput = TrainEpochs(
        one, train, sampler, who,
        [&](const at::Tensor& images, const at::Tensor& labels) {
          ddp->SyncBuffers();
          optimizer.zero_grad();
          torch::Tensor loss = torch::cross_entropy_loss(net->forward(images), labels);
          loss.backward();
          optimizer.step();
          return loss.item<double>();
        },
        hooks);
    if (rank == 0) {
      std::printf(
          "[rank0] epoch %d: %.1f s, %.0f samples/s in all, test accuracy %.2f%% (%lld "
          "images)\n",
          epoch + 1, SecondsSince(epoch_start), throughput * group->size(),
          100 * Accuracy(net, test, flags.test_images),
          static_cast<long long>(TestImages(test, flags.test_images)));
    }
  }
  if (rank == 0) {
    std::printf("[rank0] trained %d epoch(s) in %.1f s with %d process(es)\n", flags.epochs,
                SecondsSince(start), group->size());
  }
  group->Barrier().Get(absl::Seconds(300));  // rank 0 hosts the store the others use
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  tessera::examples::SetDefaultTestImages(2000);  // each epoch's; ResNet-18 is slow to run
  return tessera::examples::RunExample(
      argc, argv,
      "A ResNet-18 trained data-parallel (DDP over Gloo) on Fashion-MNIST; run it with "
      "tessera-run --nproc_per_node N.",
      tessera::examples::Train);
}
