// The hybrid DDP + RPC job on Fashion-MNIST: rank 0 is the parameter server
// ("ps") holding a 12,544 x 64 embedding table of image patch words (an
// RRef-owned EmbeddingTable); ranks 1.. are trainers, each with a replica of
// the dense classifier wrapped in DistributedDataParallel over Gloo. One
// distributed autograd backward per step sends the table's gradient to the
// server and lets DDP average the dense gradients; one DistributedOptimizer
// step updates both (see hybrid_trainer.h).
//
//   bazel-bin/launcher/tessera-run --standalone --nproc_per_node 3
//       bazel-bin/examples/hybrid_ddp_rpc/hybrid_ddp_rpc --epochs 2
// With --checkpoint_dir (and tessera-run --max_restarts 1) the first trainer
// saves the table and the dense part, and a restarted group resumes.
// (one command line; a backslash would end a // comment's line in C++).
// `hybrid_ddp_rpc --help` lists the flags.
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_process_group.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "examples/common/remote_parameters.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"
#include "examples/hybrid_ddp_rpc/hybrid_trainer.h"
#include "tessera/worker.h"

namespace tessera::examples {
namespace {

using Clock = std::chrono::steady_clock;

// Rank 0: owns the table until every trainer is done.
int RunServer(Worker& worker, const TrainingFlags& flags) {
  auto table = worker.RemoteObject<EmbeddingTable>("ps", kVocabulary, kEmbeddingDim,
                                                   static_cast<int64_t>(flags.seed));
  // Trainers that ask before this line wait for it (see Note [Late registration]).
  worker.Register("table", [table] { return table; });
  std::printf("[ps] holding a %lld x %lld embedding table for %d trainers\n",
              static_cast<long long>(kVocabulary), static_cast<long long>(kEmbeddingDim),
              worker.world_size() - 1);
  std::fflush(stdout);
  return 0;
}

// Ranks 1..N: DDP replicas of the dense part, sharing the server's table.
int RunTrainer(Worker& worker, const TrainingFlags& flags) {
  const auto start = Clock::now();
  const int trainers = worker.world_size() - 1;
  const int index = worker.rank() - 1;
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  auto table = worker.RpcSync<rref::RRef<EmbeddingTable>>("ps", "table");
  collectives::GlooOptions gloo;
  gloo.store_prefix = "hybrid/ddp";
  auto group = collectives::CreateGlooProcessGroup(&worker.rpc().store(), index, trainers, gloo);
  dist_optim::AdamOptions adam;
  adam.lr = flags.lr;
  auto trainer = HybridTrainer::Create(worker.rrefs(), worker.autograd(), group.get(), table, adam);

  // The first trainer saves the table (fetched from the server), the dense
  // part (the same on every replica), its optimizer's state and the
  // position; on a restart every trainer loads the dense part and that
  // optimizer state (the dense moments are the same on every replica; the
  // table's are the first trainer's), and the first loads the table back
  // into the server's new one, before anyone trains (the barrier).
  const auto table_params = table.RpcSync<std::vector<rref::RRef<at::Tensor>>>("parameter_rrefs");
  Resume resume(flags, "hybrid_ddp_rpc", /*writer=*/index == 0);
  if (resume.last().has_value()) {
    torch::NoGradGuard no_grad;
    for (auto& item : trainer->dense()->named_parameters()) {
      auto saved = resume.last()->tensors.find("dense." + item.key());
      Require(saved != resume.last()->tensors.end(), "the checkpoint has no dense." + item.key());
      item.value().copy_(saved->second);
    }
    if (index == 0) LoadParameters(worker, table_params, resume.last()->tensors, "table.");
    LoadOptimizerState(trainer->optimizer(), resume.last()->tensors, "optimizer.");
  }
  group->Barrier().Get(absl::Minutes(5));
  const checkpoint::TrainingPosition start_at = resume.Start(worker.name());
  EpochHooks hooks{start_at.epoch, start_at.step,
                   [&](int64_t epoch, int64_t step, int64_t steps_done) {
                     if (!resume.Due(steps_done)) return;
                     auto tensors = FetchParameters(table_params, "table.");
                     for (const auto& item : trainer->dense()->named_parameters()) {
                       tensors["dense." + item.key()] = item.value().detach().clone();
                     }
                     tensors.merge(FetchOptimizerState(trainer->optimizer(), "optimizer."));
                     resume.Save(worker.name(), std::move(tensors), {epoch, step, 0, {}});
                   }};
  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {trainers, index, /*shuffle=*/true, /*seed=*/1, false});
  TrainEpochs(
      flags, train, sampler, worker.name(),
      [&](const at::Tensor& images, const at::Tensor& labels) {
        return trainer->Step(images, labels);
      },
      hooks);
  if (index == 0) {
    const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
    std::printf(
        "[%s] test accuracy %.2f%% (%lld images) after %d epochs x %d trainers, "
        "%.1f s\n",
        worker.name().c_str(), 100 * trainer->Accuracy(test.images, test.labels),
        static_cast<long long>(test.labels.size(0)), flags.epochs, trainers, SecondsSince(start));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  using namespace tessera;
  examples::SetDefaultLearningRate(3e-3);
  return examples::RunExample(
      argc, argv,
      "Hybrid DDP + RPC training on Fashion-MNIST: a parameter server holds an "
      "embedding table, DDP trainers share it; run it with tessera-run "
      "--nproc_per_node N (N >= 3).",
      [](const examples::TrainingFlags& flags) {
        WorkerOptions options = WorkerOptions::FromEnv();
        examples::Require(options.world_size >= 3,
                          "needs a parameter server and at least two trainers: "
                          "--nproc_per_node >= 3");
        options.name = options.rank == 0 ? "ps" : absl::StrCat("trainer", options.rank);
        auto worker = Worker::Start(options);
        examples::RegisterHybridClasses(worker->rrefs().classes());
        examples::RegisterParameterLoading(*worker);
        const int status = options.rank == 0 ? examples::RunServer(*worker, flags)
                                             : examples::RunTrainer(*worker, flags);
        worker->Shutdown();  // the server's returns once every trainer is done
        return status;
      });
}
