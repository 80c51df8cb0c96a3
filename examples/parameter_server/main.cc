// Parameter-server training of a CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist): rank 0 is the parameter server ("ps"), holding the
// model; ranks 1..N are trainers, each on its own shard. A trainer step:
// inside a distributed autograd context, forward through the server
// (rpc "forward"), loss here, dist_autograd Backward (gradients flow back to
// the server), DistributedOptimizer step (runs on the server). The server
// reports the test accuracy when every trainer is done.
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3 \
//       bazel-bin/examples/parameter_server/parameter_server [--epochs 2]
//
// Flags: --epochs E (2), --batch B (64), --lr LR (0.001, Adam),
// --optimizer adam|sgd, --max_steps S (per trainer and epoch; 0 = all),
// --log_every K (100), --seed S (0).
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/tensor.h>
#include <ATen/Parallel.h>

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
#include "examples/parameter_server/parameter_server.h"
#include "rpc/runtime.h"
#include "rref/remote.h"

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int epochs = 2;
  int64_t batch = 64;
  double lr = 1e-3;
  std::string optimizer = "adam";
  int64_t max_steps = 0;
  int64_t log_every = 100;
  uint64_t seed = 0;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    if (name == "--epochs") flags.epochs = std::atoi(value.c_str());
    else if (name == "--batch") flags.batch = std::atoll(value.c_str());
    else if (name == "--lr") flags.lr = std::atof(value.c_str());
    else if (name == "--optimizer") flags.optimizer = value;
    else if (name == "--max_steps") flags.max_steps = std::atoll(value.c_str());
    else if (name == "--log_every") flags.log_every = std::atoll(value.c_str());
    else if (name == "--seed") flags.seed = std::strtoull(value.c_str(), nullptr, 10);
    else throw StatusError(absl::InvalidArgumentError("unknown flag " + name));
  }
  if (flags.epochs < 1 || flags.batch < 1 || flags.log_every < 1) {
    throw StatusError(absl::InvalidArgumentError("--epochs, --batch, --log_every must be >= 1"));
  }
  return flags;
}

dist_optim::OptimizerOptions OptimizerFor(const Flags& flags) {
  if (flags.optimizer == "adam") {
    dist_optim::AdamOptions adam;
    adam.lr = flags.lr;
    return adam;
  }
  if (flags.optimizer == "sgd") {
    dist_optim::SgdOptions sgd;
    sgd.lr = flags.lr;
    sgd.momentum = 0.9;
    return sgd;
  }
  throw StatusError(absl::InvalidArgumentError("--optimizer must be adam or sgd"));
}

std::string DoneKey(int rank) { return absl::StrCat("parameter_server/done/", rank); }

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Rank 0: serves the model until every trainer is done, then evaluates.
int RunServer(rpc::RpcOptions options, const Flags& flags) {
  const auto start = Clock::now();
  auto test = ValueOrThrow(data::LoadFashionMnist(data::Split::kTest));
  auto server = std::make_shared<ParameterServer>(flags.seed);
  rpc::Registry registry;
  ThrowIfError(registry.Register("parameters", [server](rpc::CallContext& ctx) {
    return server->Parameters(ctx);
  }));
  ThrowIfError(registry.Register("forward", [server](at::Tensor images) {
    return server->Forward(std::move(images));
  }));
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  auto rrefs = rref::RRefContext::Create(std::move(classes));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = ValueOrThrow(rpc::Runtime::Init(options, std::move(registry), {rrefs, autograd}));
  std::printf("[ps] serving a CNN to %d trainers\n", options.world_size - 1);
  std::fflush(stdout);
  std::vector<std::string> done;
  for (int rank = 1; rank < options.world_size; ++rank) done.push_back(DoneKey(rank));
  ThrowIfError(runtime->store().Wait(done, absl::Hours(2)));
  const double accuracy = server->Accuracy(test.images, test.labels);
  std::printf("[ps] test accuracy %.2f%% (%lld images) after %d epochs x %d trainers, %.1f s\n",
              100 * accuracy, static_cast<long long>(test.labels.size(0)), flags.epochs,
              options.world_size - 1, SecondsSince(start));
  std::fflush(stdout);
  ThrowIfError(runtime->Shutdown());
  return 0;
}

// Ranks 1..N: train on this trainer's shard through the server.
int RunTrainer(rpc::RpcOptions options, const Flags& flags) {
  const int trainers = options.world_size - 1;
  const int index = options.rank - 1;
  auto train = ValueOrThrow(data::LoadFashionMnist(data::Split::kTrain));
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  auto rrefs = rref::RRefContext::Create(std::move(classes));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = ValueOrThrow(rpc::Runtime::Init(options, rpc::Registry(), {rrefs, autograd}));
  auto params = runtime->RpcSync<std::vector<rref::RRef<at::Tensor>>>("ps", "parameters");
  auto optimizer =
      ValueOrThrow(dist_optim::DistributedOptimizer::Create(*rrefs, params, OptimizerFor(flags)));

  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {trainers, index, /*shuffle=*/true, /*seed=*/1, false});
  const int64_t steps_per_epoch = (static_cast<int64_t>(sampler.num_samples()) + flags.batch - 1) /
                                  flags.batch;
  const int64_t steps = flags.max_steps > 0 ? std::min(flags.max_steps, steps_per_epoch)
                                            : steps_per_epoch;
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    double window_loss = 0;
    int64_t window_steps = 0, window_samples = 0;
    auto window_start = Clock::now();
    for (int64_t step = 1; step <= steps; ++step) {
      auto indices = sampler.next(static_cast<size_t>(flags.batch));
      if (!indices) break;
      at::Tensor index = at::tensor(std::vector<int64_t>(indices->begin(), indices->end()));
      at::Tensor images = train.images.index_select(0, index);
      at::Tensor labels = train.labels.index_select(0, index);
      dist_autograd::ContextGuard context(*autograd);
      at::Tensor logits = runtime->RpcSync<at::Tensor>("ps", "forward", images);
      at::Tensor loss = at::cross_entropy_loss(logits, labels);
      ThrowIfError(autograd->Backward(context.id(), {loss}));
      ThrowIfError(optimizer.Step(context.id()));
      window_loss += loss.item<double>();
      ++window_steps;
      window_samples += images.size(0);
      if (step % flags.log_every == 0 || step == steps) {
        std::printf("[trainer %d] epoch %d step %lld/%lld: loss %.4f, %.0f samples/s\n",
                    options.rank, epoch + 1, static_cast<long long>(step),
                    static_cast<long long>(steps), window_loss / window_steps,
                    window_samples / SecondsSince(window_start));
        std::fflush(stdout);
        window_loss = 0;
        window_steps = window_samples = 0;
        window_start = Clock::now();
      }
    }
  }
  ThrowIfError(runtime->store().Set(DoneKey(options.rank), "1"));
  ThrowIfError(runtime->Shutdown());
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  try {
    const examples::Flags flags = examples::ParseFlags(argc, argv);
    at::set_num_threads(1);  // the machine's cores go to the processes
    rpc::RpcOptions options = ValueOrThrow(rpc::RpcOptions::FromEnv());
    if (options.world_size < 2) {
      throw StatusError(absl::InvalidArgumentError(
          "needs a parameter server and at least one trainer: --nproc_per_node >= 2"));
    }
    options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
    return options.rank == 0 ? examples::RunServer(options, flags)
                             : examples::RunTrainer(options, flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "parameter_server: %s\n", e.what());
    return 1;
  }
}
