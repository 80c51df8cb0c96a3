// The hybrid DDP + RPC job on Fashion-MNIST: rank 0 is the parameter server
// ("ps") holding a 12,544 x 64 embedding table of image patch words (an
// RRef-owned EmbeddingTable); ranks 1.. are trainers, each with a replica of
// the dense classifier wrapped in DistributedDataParallel over Gloo. One
// distributed autograd backward per step sends the table's gradient to the
// server and lets DDP average the dense gradients; one DistributedOptimizer
// step updates both (see hybrid_trainer.h).
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3 \
//       bazel-bin/examples/hybrid_ddp_rpc/hybrid_ddp_rpc [--epochs 2]
//
// Flags: --epochs E (2), --batch B (64, per trainer), --lr LR (0.003, Adam),
// --max_steps S (per epoch; 0 = all), --log_every K (100), --seed S (0).
#include <ATen/Parallel.h>
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
#include "examples/hybrid_ddp_rpc/hybrid_trainer.h"
#include "rpc/runtime.h"
#include "rref/remote.h"

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  int epochs = 2;
  int64_t batch = 64;
  double lr = 3e-3;
  int64_t max_steps = 0;
  int64_t log_every = 100;
  int64_t seed = 0;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string name = argv[i], value = argv[i + 1];
    if (name == "--epochs") flags.epochs = std::atoi(value.c_str());
    else if (name == "--batch") flags.batch = std::atoll(value.c_str());
    else if (name == "--lr") flags.lr = std::atof(value.c_str());
    else if (name == "--max_steps") flags.max_steps = std::atoll(value.c_str());
    else if (name == "--log_every") flags.log_every = std::atoll(value.c_str());
    else if (name == "--seed") flags.seed = std::atoll(value.c_str());
    else throw StatusError(absl::InvalidArgumentError("unknown flag " + name));
  }
  if (flags.epochs < 1 || flags.batch < 1 || flags.log_every < 1) {
    throw StatusError(absl::InvalidArgumentError("--epochs, --batch, --log_every must be >= 1"));
  }
  return flags;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr char kTableKey[] = "hybrid/table_ready";
std::string DoneKey(int rank) { return absl::StrCat("hybrid/done/", rank); }

// Rank 0: owns the table until every trainer is done.
int RunServer(rpc::RpcOptions options, std::shared_ptr<rref::RRefContext> rrefs,
              const Flags& flags) {
  auto table = std::make_shared<rref::RRef<EmbeddingTable>>();
  rpc::Registry registry;
  ThrowIfError(registry.Register("table", [table]() { return *table; }));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = ValueOrThrow(rpc::Runtime::Init(options, std::move(registry), {rrefs, autograd}));
  *table = rref::RemoteObject<EmbeddingTable>(*rrefs, "ps", kVocabulary, kEmbeddingDim,
                                              flags.seed);
  ThrowIfError(runtime->store().Set(kTableKey, "1"));
  std::printf("[ps] holding a %lld x %lld embedding table for %d trainers\n",
              static_cast<long long>(kVocabulary), static_cast<long long>(kEmbeddingDim),
              options.world_size - 1);
  std::fflush(stdout);
  std::vector<std::string> done;
  for (int rank = 1; rank < options.world_size; ++rank) done.push_back(DoneKey(rank));
  ThrowIfError(runtime->store().Wait(done, absl::Hours(2)));
  *table = rref::RRef<EmbeddingTable>();
  ThrowIfError(runtime->Shutdown());
  return 0;
}

// Ranks 1..N: DDP replicas of the dense part, sharing the server's table.
int RunTrainer(rpc::RpcOptions options, std::shared_ptr<rref::RRefContext> rrefs,
               const Flags& flags) {
  const auto start = Clock::now();
  const int trainers = options.world_size - 1;
  const int index = options.rank - 1;
  auto train = ValueOrThrow(data::LoadFashionMnist(data::Split::kTrain));
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = ValueOrThrow(rpc::Runtime::Init(options, rpc::Registry(), {rrefs, autograd}));
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
  const int64_t steps_per_epoch =
      (static_cast<int64_t>(sampler.num_samples()) + flags.batch - 1) / flags.batch;
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
      at::Tensor batch = at::tensor(std::vector<int64_t>(indices->begin(), indices->end()));
      window_loss += trainer->Step(train.images.index_select(0, batch),
                                   train.labels.index_select(0, batch));
      ++window_steps;
      window_samples += batch.size(0);
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
    if (options.world_size < 3) {
      throw StatusError(absl::InvalidArgumentError(
          "needs a parameter server and at least two trainers: --nproc_per_node >= 3"));
    }
    options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
    rref::ClassRegistry classes;
    dist_optim::RegisterLocalOptimizer(classes);
    examples::RegisterHybridClasses(classes);
    auto rrefs = rref::RRefContext::Create(std::move(classes));
    return options.rank == 0 ? examples::RunServer(options, rrefs, flags)
                             : examples::RunTrainer(options, rrefs, flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid_ddp_rpc: %s\n", e.what());
    return 1;
  }
}
