// The hybrid DDP + RPC job with real processes: this process is the
// parameter server (holding the EmbeddingTable), two children are trainers
// with DDP replicas of the dense part. After every step the trainers' dense
// parameters are identical, their dense gradients (averaged by DDP inside
// the distributed backward) are identical and live only in the autograd
// context; and the table moves by exactly both trainers' gradients. Then the
// same with uneven inputs inside a DDP Join.
#include <ATen/TensorOperators.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/rand.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/mutex.h"
#include "common/status.h"
#include "dist_optim/local_optimizer.h"
#include "examples/hybrid_ddp_rpc/hybrid_trainer.h"
#include "rpc/init.h"
#include "rref/remote.h"
#include "store/store_client.h"
#include "store/store_server.h"
#include "tests/testing/multiprocess.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using examples::EmbeddingTable;

constexpr int kSteps = 4;
constexpr double kLr = 0.5;

std::shared_ptr<rref::RRefContext> MakeRRefContext() {
  rref::ClassRegistry classes;
  dist_optim::RegisterLocalOptimizer(classes);
  examples::RegisterHybridClasses(classes);
  return rref::RRefContext::Create(std::move(classes));
}

// Whether `values` is the same on every rank of `group`.
absl::StatusOr<bool> SameEverywhere(collectives::ProcessGroup& group, const at::Tensor& values) {
  at::Tensor low = values.clone(), high = values.clone();
  for (auto [tensor, op] :
       {std::pair{low, collectives::ReduceOp::kMin}, {high, collectives::ReduceOp::kMax}}) {
    TESSERA_RETURN_IF_ERROR(group.Allreduce(tensor, op).Wait(absl::Seconds(60)).status());
  }
  return at::equal(low, high);
}

at::Tensor Flat(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().reshape({-1}));
  return at::cat(flat);
}

// The dense gradients this trainer alone would get from a batch: the same
// lookup and forward, differentiated locally (torch::autograd::grad leaves
// .grad and the reducer's hooks alone).
std::vector<at::Tensor> LocalDenseGradients(examples::HybridTrainer& trainer,
                                            const at::Tensor& images, const at::Tensor& labels) {
  at::Tensor embedded =
      trainer.table().RpcSync<at::Tensor>("lookup", examples::PatchWords(images)).detach();
  at::Tensor loss = at::cross_entropy_loss(trainer.dense()->forward(embedded), labels);
  return torch::autograd::grad({loss}, trainer.dense()->parameters());
}

// How a trainer runs: `steps` batches; inside a DDP Join when `join` is set
// (the trainers then may have different numbers of steps).
struct TrainerPlan {
  int steps = kSteps;
  std::optional<ddp::JoinOptions> join;
  // In steps before `together` (0-based) both trainers train, and compare
  // their gradients and parameters; from `alone_from` on the other trainer
  // has joined and made its last table update, so this one trains alone.
  int together = kSteps;
  int alone_from = kSteps;
};

// The plan's steps, checking each step's dense gradients (and parameters,
// while both train); adds the table's gradients to `table_gradients`.
absl::Status RunSteps(int rank, const TrainerPlan& plan, examples::HybridTrainer& trainer,
                      collectives::ProcessGroup& group, dist_autograd::DistAutograd& autograd,
                      at::Tensor& table_gradients) {
  absl::Status checks;
  for (int step = 0; step < plan.steps; ++step) {
    at::manual_seed(100 * rank + step);  // each trainer its own data
    at::Tensor images = at::rand({16, 1, 28, 28});
    at::Tensor labels = at::randint(10, {16}, at::kLong);
    const bool together = step < plan.together;
    const bool alone = step >= plan.alone_from;
    trainer.Step(images, labels, [&](int64_t context_id) {
      auto grads = autograd.GetGradients(context_id);
      std::vector<at::Tensor> dense_grads;
      for (const auto& p : trainer.dense()->parameters()) {
        if (!grads.contains(p)) checks.Update(absl::InternalError("a dense gradient is missing"));
        if (p.grad().defined()) checks.Update(absl::InternalError(".grad was written"));
        dense_grads.push_back(grads.contains(p) ? grads.at(p) : at::zeros_like(p));
      }
      if (alone) {
        // The joined trainer shadowed this pass with zeros: the average is
        // half this trainer's gradient, or all of it when dividing by the
        // trainers still training.
        const double share = plan.join->divide_by_initial_world_size ? 0.5 : 1.0;
        if (!at::allclose(Flat(dense_grads),
                          Flat(LocalDenseGradients(trainer, images, labels)) * share, 1e-4, 1e-6)) {
          checks.Update(absl::InternalError(absl::StrCat(
              "step ", step, ": dense gradients are not ", share, " x this trainer's own")));
        }
      } else if (together) {
        auto same = SameEverywhere(group, Flat(dense_grads));
        if (!same.ok() || !*same) {
          checks.Update(
              absl::InternalError(absl::StrCat("step ", step, ": dense gradients differ")));
        }
      }
      table_gradients += trainer.table().RpcSync<at::Tensor>("gradient", context_id);
    });
    TESSERA_RETURN_IF_ERROR(checks);
    if (!together) continue;
    TESSERA_ASSIGN_OR_RETURN(const bool same,
                             SameEverywhere(group, Flat(trainer.dense()->parameters())));
    if (!same) return absl::InternalError(absl::StrCat("step ", step, ": dense parameters differ"));
  }
  return absl::OkStatus();
}

absl::Status Train(int rank, const TrainerPlan& plan) {
  auto rrefs = MakeRRefContext();
  auto autograd = dist_autograd::DistAutograd::Create();
  TESSERA_ASSIGN_OR_RETURN(auto runtime,
                           rpc::TryInit(TestWorkerOptions(), rpc::Registry(), {rrefs, autograd}));
  auto table = runtime->RpcSync<rref::RRef<EmbeddingTable>>("worker0", "table");
  collectives::GlooOptions gloo;
  gloo.store_prefix = "hybrid_test/ddp";
  auto group = collectives::CreateGlooProcessGroup(&runtime->store(), rank - 1, 2, gloo);
  dist_optim::SgdOptions sgd;
  sgd.lr = kLr;
  auto trainer = examples::HybridTrainer::Create(*rrefs, *autograd, group.get(), table, sgd);
  at::Tensor table_gradients = at::zeros({examples::kVocabulary, examples::kEmbeddingDim});
  if (plan.join.has_value()) {
    auto join = trainer->ddp().Join(*plan.join);
    TESSERA_RETURN_IF_ERROR(RunSteps(rank, plan, *trainer, *group, *autograd, table_gradients));
    TESSERA_RETURN_IF_ERROR(join.TryFinish());
  } else {
    TESSERA_RETURN_IF_ERROR(RunSteps(rank, plan, *trainer, *group, *autograd, table_gradients));
  }
  // Both trainers leave with the same dense model (from a Join: the last
  // one to train's).
  TESSERA_ASSIGN_OR_RETURN(const bool same,
                           SameEverywhere(*group, Flat(trainer->dense()->parameters())));
  if (!same) return absl::InternalError("the trainers ended with different dense parameters");
  runtime->RpcSync<void>("worker0", "report", table_gradients);
  TESSERA_RETURN_IF_ERROR(runtime->store().Set(absl::StrCat("hybrid_test/reported/", rank), "1"));
  trainer.reset();
  return runtime->TryShutdown();
}

int RunTrainer(const TrainerPlan& plan) {
  const char* rank = std::getenv("RANK");
  auto status = Train(std::atoi(rank), plan);
  if (!status.ok()) std::fprintf(stderr, "trainer %s: %s\n", rank, status.ToString().c_str());
  return status.ok() ? 0 : 1;
}

TESSERA_WORKER_SCENARIO(hybrid_trainer) { return RunTrainer(TrainerPlan{}); }

// Uneven inputs: trainer 1 has 2 batches, trainer 2 has 5. From trainer 2's
// step 3 on, trainer 1 has joined and its last table update is done (it
// shadowed trainer 2's step 2 after its own optimizer step).
TrainerPlan JoiningPlan(bool divide_by_initial_world_size) {
  TrainerPlan plan;
  const bool first = std::string(std::getenv("RANK")) == "1";
  plan.steps = first ? 2 : 5;
  plan.together = 2;
  plan.alone_from = first ? plan.steps : 3;
  plan.join.emplace();
  plan.join->divide_by_initial_world_size = divide_by_initial_world_size;
  return plan;
}
TESSERA_WORKER_SCENARIO(hybrid_joining_trainer) { return RunTrainer(JoiningPlan(true)); }
TESSERA_WORKER_SCENARIO(hybrid_joining_trainer_rescaled) { return RunTrainer(JoiningPlan(false)); }

// Waits until every trainer has reported (`keys` in the store), failing as
// soon as one exits with an error instead: a failed trainer never reports.
absl::Status WaitForReports(store::StoreClient& store, const std::vector<std::string>& keys,
                            const std::vector<std::unique_ptr<WorkerProcess>>& trainers,
                            absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration slice = std::min(absl::Seconds(1), deadline - absl::Now());
    absl::Status waited = store.Wait(keys, std::max(slice, absl::ZeroDuration()));
    if (!absl::IsDeadlineExceeded(waited) || absl::Now() >= deadline) return waited;
    for (size_t i = 0; i < trainers.size(); ++i) {
      if (const int code = trainers[i]->Wait(absl::ZeroDuration()); code > 0) {
        return absl::AbortedError(
            absl::StrCat("trainer ", i + 1, " exited with code ", code, " before reporting"));
      }
    }
  }
}

// This process is the parameter server for two trainers running `scenario`:
// checks that the table moved by exactly the gradients they report.
void ServeTwoTrainers(const std::string& scenario) {
  auto store = ValueOrThrow(store::StoreServer::Start("127.0.0.1", 0, TestJobSecret()));
  std::vector<std::unique_ptr<WorkerProcess>> trainers;
  for (int rank = 1; rank <= 2; ++rank) {
    trainers.push_back(
        std::make_unique<WorkerProcess>(scenario, WorkerEnv(rank, 3, store->port())));
  }
  Mutex mu;
  std::vector<at::Tensor> reports;
  rpc::Registry registry;
  registry.Register("report", [&](at::Tensor gradients) {
    MutexLock lock(&mu);
    reports.push_back(gradients);
  });
  auto rrefs = MakeRRefContext();
  auto autograd = dist_autograd::DistAutograd::Create();
  auto runtime = rpc::Init(InProcessOptions("worker0", 0, 3, store->port()), std::move(registry),
                           {rrefs, autograd});
  auto table = rref::RemoteObject<EmbeddingTable>(*rrefs, "worker0", examples::kVocabulary,
                                                  examples::kEmbeddingDim, int64_t{7});
  const at::Tensor initial = table.RpcSync<at::Tensor>("values");
  // Registered after start: the trainers' first calls wait for it.
  runtime->Register("table", [table] { return table; });
  // Shutdown is collective: check while the trainers wait in theirs.
  const absl::Status reported =
      WaitForReports(runtime->store(), {"hybrid_test/reported/1", "hybrid_test/reported/2"},
                     trainers, absl::Seconds(120));
  ASSERT_TRUE(reported.ok()) << reported;
  {
    MutexLock lock(&mu);
    ASSERT_EQ(reports.size(), 2u);
    EXPECT_GT(reports[0].abs().sum().item<double>(), 0);
    EXPECT_GT(reports[1].abs().sum().item<double>(), 0);
    EXPECT_FALSE(at::allclose(reports[0], reports[1])) << "the trainers saw different data";
    // Plain SGD: every trainer's step subtracts lr x its gradient.
    EXPECT_TRUE(at::allclose(table.RpcSync<at::Tensor>("values"),
                             initial - (reports[0] + reports[1]) * kLr, 1e-4, 1e-5));
  }
  EXPECT_TRUE(runtime->TryShutdown().ok());
  for (auto& trainer : trainers) EXPECT_EQ(trainer->Wait(absl::Seconds(60)), 0);
}

TEST(HybridTest, DenseReplicasStayEqualAndTheTableGetsBothTrainersGradients) {
  ServeTwoTrainers("hybrid_trainer");
}

// A Join inside the distributed backward: the trainer with more batches is
// not left waiting, its passes alone average with the joined trainer's
// zeros, and both end with the same dense model.
TEST(HybridTest, TrainersWithUnevenInputsJoin) { ServeTwoTrainers("hybrid_joining_trainer"); }

TEST(HybridTest, TrainersWithUnevenInputsJoinAveragingOverTheRanksStillTraining) {
  ServeTwoTrainers("hybrid_joining_trainer_rescaled");
}

}  // namespace
}  // namespace tessera::testing
