// Parameter-server training of a CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist): rank 0 is the parameter server ("ps"), holding the
// model; ranks 1..N are trainers, each on its own shard. A trainer step:
// inside a distributed autograd context, forward through the server
// (rpc "forward"), loss here, dist_autograd Backward (gradients flow back to
// the server), DistributedOptimizer step (runs on the server). The server
// reports the test accuracy when every trainer is done.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/parameter_server/parameter_server [--epochs 2]
// (one command line; a backslash would end a // comment's line in C++).
//
// Flags: --epochs E (2), --batch B (64), --lr LR (0.001, Adam),
// --optimizer adam|sgd, --max_steps S (per trainer and epoch; 0 = all),
// --log_every K (100), --seed S (0).
#include <ATen/ops/tensor.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "dist_autograd/dist_autograd.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/dist_training.h"
#include "examples/common/example_main.h"
#include "examples/parameter_server/parameter_server.h"
#include "rpc/runtime.h"
#include "rref/remote.h"

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

dist_optim::OptimizerOptions OptimizerFor(const TrainingFlags& flags) {
  const std::string& kind = flags.extra.at("optimizer");
  if (kind == "adam") {
    dist_optim::AdamOptions adam;
    adam.lr = flags.lr;
    return adam;
  }
  if (kind == "sgd") {
    dist_optim::SgdOptions sgd;
    sgd.lr = flags.lr;
    sgd.momentum = 0.9;
    return sgd;
  }
  throw StatusError(absl::InvalidArgumentError("--optimizer must be adam or sgd"));
}

// Rank 0: serves the model until every trainer is done, then evaluates.
int RunServer(rpc::RpcOptions options, const TrainingFlags& flags) {
  const auto start = Clock::now();
  auto test = ValueOrThrow(data::LoadFashionMnist(data::Split::kTest));
  auto server = std::make_shared<ParameterServer>(flags.seed);
  rpc::Registry registry;
  registry.Register("parameters", [server](rpc::CallContext& ctx) {
    return server->Parameters(ctx);
  });
  registry.Register("forward", [server](at::Tensor images) {
    return server->Forward(std::move(images));
  });
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  auto rrefs = rref::RRefContext::Create(std::move(classes));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = rpc::Runtime::Init(options, std::move(registry), {rrefs, autograd});
  std::printf("[ps] serving a CNN to %d trainers\n", options.world_size - 1);
  std::fflush(stdout);
  WaitUntilDone(*runtime, "parameter_server", 1, options.world_size);
  const double accuracy = server->Accuracy(test.images, test.labels);
  std::printf("[ps] test accuracy %.2f%% (%lld images) after %d epochs x %d trainers, %.1f s\n",
              100 * accuracy, static_cast<long long>(test.labels.size(0)), flags.epochs,
              options.world_size - 1, SecondsSince(start));
  std::fflush(stdout);
  runtime->Shutdown();
  return 0;
}

// Ranks 1..N: train on this trainer's shard through the server.
int RunTrainer(rpc::RpcOptions options, const TrainingFlags& flags) {
  const int trainers = options.world_size - 1;
  const int index = options.rank - 1;
  auto train = ValueOrThrow(data::LoadFashionMnist(data::Split::kTrain));
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  auto rrefs = rref::RRefContext::Create(std::move(classes));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = rpc::Runtime::Init(options, rpc::Registry(), {rrefs, autograd});
  auto params = runtime->RpcSync<std::vector<rref::RRef<at::Tensor>>>("ps", "parameters");
  auto optimizer =
      dist_optim::DistributedOptimizer::Create(*rrefs, params, OptimizerFor(flags));

  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {trainers, index, /*shuffle=*/true, /*seed=*/1, false});
  TrainEpochs(flags, train, sampler, absl::StrCat("trainer ", options.rank),
              [&](const at::Tensor& images, const at::Tensor& labels) {
                return DistAutogradStep(
                    *autograd, optimizer,
                    [&] { return runtime->RpcSync<at::Tensor>("ps", "forward", images); }, labels);
              });
  MarkDone(*runtime, "parameter_server", options.rank);
  runtime->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  examples::TrainingFlags defaults;
  defaults.extra = {{"optimizer", "adam"}};
  return examples::RunExample(
      argc, argv, "parameter_server", defaults,
      [](const examples::TrainingFlags& flags, rpc::RpcOptions options) {
        examples::Require(options.world_size >= 2,
                          "needs a parameter server and at least one trainer: "
                          "--nproc_per_node >= 2");
        options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
        return options.rank == 0 ? examples::RunServer(options, flags)
                                 : examples::RunTrainer(options, flags);
      });
}
