// Parameter-server training of a CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist): rank 0 is the parameter server ("ps"), holding the
// model; ranks 1..N are trainers, each on its own shard. A trainer step:
// inside a distributed autograd context, forward through the server
// (rpc "forward"), loss here, dist_autograd Backward (gradients flow back to
// the server), DistributedOptimizer step (runs on the server). The server
// reports the test accuracy once every trainer is done — its Shutdown()
// returns then, as rpc.shutdown() does.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/parameter_server/parameter_server --epochs 2
// (one command line; a backslash would end a // comment's line in C++).
// `parameter_server --help` lists the flags.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/dist_training.h"
#include "examples/common/training.h"
#include "examples/parameter_server/parameter_server.h"
#include "tessera/worker.h"

ABSL_FLAG(std::string, optimizer, "adam", "adam, or sgd (momentum 0.9)");

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

dist_optim::OptimizerOptions OptimizerFor(const TrainingFlags& flags) {
  const std::string kind = absl::GetFlag(FLAGS_optimizer);
  Require(kind == "adam" || kind == "sgd", "--optimizer must be adam or sgd");
  if (kind == "adam") {
    dist_optim::AdamOptions adam;
    adam.lr = flags.lr;
    return adam;
  }
  dist_optim::SgdOptions sgd;
  sgd.lr = flags.lr;
  sgd.momentum = 0.9;
  return sgd;
}

// Rank 0: serves the model until every trainer is done, then evaluates.
int RunServer(WorkerOptions options, const TrainingFlags& flags) {
  const auto start = Clock::now();
  const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
  auto worker = Worker::Start(options);
  auto server = std::make_shared<ParameterServer>(flags.seed);
  worker->Register("parameters",
                   [server](rpc::CallContext& ctx) { return server->Parameters(ctx); });
  worker->Register("forward", [server](at::Tensor images) { return server->Forward(images); });
  std::printf("[ps] serving a CNN to %d trainers\n", worker->world_size() - 1);
  std::fflush(stdout);
  worker->Shutdown();  // returns once every trainer has finished and shut down
  std::printf("[ps] test accuracy %.2f%% (%lld images) after %d epochs x %d trainers, %.1f s\n",
              100 * server->Accuracy(test.images, test.labels),
              static_cast<long long>(test.labels.size(0)), flags.epochs, options.world_size - 1,
              SecondsSince(start));
  return 0;
}

// Ranks 1..N: train on this trainer's shard through the server.
int RunTrainer(WorkerOptions options, const TrainingFlags& flags) {
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  auto worker = Worker::Start(options);
  auto params = worker->RpcSync<std::vector<rref::RRef<at::Tensor>>>("ps", "parameters");
  auto optimizer =
      dist_optim::DistributedOptimizer::Create(worker->rrefs(), params, OptimizerFor(flags));
  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {options.world_size - 1, options.rank - 1, /*shuffle=*/true,
                                   /*seed=*/1, /*drop_last=*/false});
  TrainEpochs(flags, train, sampler, worker->name(),
              [&](const at::Tensor& images, const at::Tensor& labels) {
                return DistAutogradStep(worker->autograd(), optimizer, labels, [&] {
                  return worker->RpcSync<at::Tensor>("ps", "forward", images);
                });
              });
  worker->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  return examples::RunExample(
      argc, argv,
      "Parameter-server training of a CNN on Fashion-MNIST; run it with tessera-run "
      "--nproc_per_node N (one server, N-1 trainers).",
      [](const examples::TrainingFlags& flags) {
        WorkerOptions options = WorkerOptions::FromEnv();
        examples::Require(options.world_size >= 2,
                          "needs a parameter server and at least one trainer: "
                          "--nproc_per_node >= 2");
        options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
        return options.rank == 0 ? examples::RunServer(options, flags)
                                 : examples::RunTrainer(options, flags);
      });
}
