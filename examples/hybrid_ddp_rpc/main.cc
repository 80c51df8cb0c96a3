// The hybrid DDP + RPC job on Fashion-MNIST: rank 0 is the parameter server
// ("ps") holding a 12,544 x 64 embedding table of image patch words (an
// RRef-owned EmbeddingTable); ranks 1.. are trainers, each with a replica of
// the dense classifier wrapped in DistributedDataParallel over Gloo. One
// distributed autograd backward per step sends the table's gradient to the
// server and lets DDP average the dense gradients; one DistributedOptimizer
// step updates both (see hybrid_trainer.h).
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/hybrid_ddp_rpc/hybrid_ddp_rpc [--epochs 2]
// (one command line; a backslash would end a // comment's line in C++).
//
// Flags: --epochs E (2), --batch B (64, per trainer), --lr LR (0.003, Adam),
// --max_steps S (per epoch; 0 = all), --log_every K (100), --seed S (0).
#include <ATen/ops/tensor.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "ddp/gloo/gloo_process_group.h"
#include "dist_optim/local_optimizer.h"
#include "examples/common/example_main.h"
#include "examples/hybrid_ddp_rpc/hybrid_trainer.h"
#include "rpc/runtime.h"
#include "rref/remote.h"

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kTableKey[] = "hybrid/table_ready";

// Rank 0: owns the table until every trainer is done.
int RunServer(rpc::RpcOptions options, std::shared_ptr<rref::RRefContext> rrefs,
              const TrainingFlags& flags) {
  auto table = std::make_shared<TableHandle>();
  rpc::Registry registry;
  registry.Register("table", [table]() { return table->Get(); });
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = rpc::Runtime::Init(options, std::move(registry), {rrefs, autograd});
  table->Set(rref::RemoteObject<EmbeddingTable>(*rrefs, "ps", kVocabulary, kEmbeddingDim,
                                                static_cast<int64_t>(flags.seed)));
  ThrowIfError(runtime->store().Set(kTableKey, "1"));
  std::printf("[ps] holding a %lld x %lld embedding table for %d trainers\n",
              static_cast<long long>(kVocabulary), static_cast<long long>(kEmbeddingDim),
              options.world_size - 1);
  std::fflush(stdout);
  WaitUntilDone(*runtime, "hybrid", 1, options.world_size);
  table->Set(rref::RRef<EmbeddingTable>());
  runtime->Shutdown();
  return 0;
}

// Ranks 1..N: DDP replicas of the dense part, sharing the server's table.
int RunTrainer(rpc::RpcOptions options, std::shared_ptr<rref::RRefContext> rrefs,
               const TrainingFlags& flags) {
  const auto start = Clock::now();
  const int trainers = options.world_size - 1;
  const int index = options.rank - 1;
  auto train = ValueOrThrow(data::LoadFashionMnist(data::Split::kTrain));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = rpc::Runtime::Init(options, rpc::Registry(), {rrefs, autograd});
  ThrowIfError(runtime->store().Wait({kTableKey}, absl::Minutes(5)));
  auto table = runtime->RpcSync<rref::RRef<EmbeddingTable>>("ps", "table");
  ddp::GlooOptions gloo;
  gloo.store_prefix = "hybrid/ddp";
  auto group = ValueOrThrow(ddp::CreateGlooProcessGroup(&runtime->store(), index, trainers, gloo));
  dist_optim::AdamOptions adam;
  adam.lr = flags.lr;
  auto trainer = ValueOrThrow(HybridTrainer::Create(*rrefs, *autograd, group.get(), table, adam));

  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {trainers, index, /*shuffle=*/true, /*seed=*/1, false});
  TrainEpochs(flags, train, sampler, absl::StrCat("trainer ", options.rank),
              [&](const at::Tensor& images, const at::Tensor& labels) {
                return trainer->Step(images, labels);
              });
  if (options.rank == 1) {
    auto test = ValueOrThrow(data::LoadFashionMnist(data::Split::kTest));
    std::printf("[trainer 1] test accuracy %.2f%% (%lld images) after %d epochs x %d trainers, "
                "%.1f s\n",
                100 * trainer->Accuracy(test.images, test.labels),
                static_cast<long long>(test.labels.size(0)), flags.epochs, trainers,
                SecondsSince(start));
    std::fflush(stdout);
  }
  trainer.reset();
  MarkDone(*runtime, "hybrid", options.rank);
  runtime->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  examples::TrainingFlags defaults;
  defaults.lr = 3e-3;
  return examples::RunExample(
      argc, argv, "hybrid_ddp_rpc", defaults,
      [](const examples::TrainingFlags& flags, rpc::RpcOptions options) {
        examples::Require(options.world_size >= 3,
                          "needs a parameter server and at least two trainers: "
                          "--nproc_per_node >= 3");
        options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
        rref::ClassRegistry classes;
        dist_optim::RegisterLocalOptimizer(classes);
        examples::RegisterHybridClasses(classes);
        auto rrefs = rref::RRefContext::Create(std::move(classes));
        return options.rank == 0 ? examples::RunServer(options, rrefs, flags)
                                 : examples::RunTrainer(options, rrefs, flags);
      });
}
