// Parameter-server training of a CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist): rank 0 is the parameter server ("ps"), holding the
// model and the plan of which batch each trainer trains next (see Note [Work
// handed out by the server], batch_plan.h); ranks 1..N are trainers. A
// trainer step: lease a batch from the server, then inside a distributed
// autograd context forward through the server (rpc "forward"), loss here,
// dist_autograd Backward (gradients flow back to the server),
// DistributedOptimizer step (runs on the server). The server reports the
// test accuracy once every batch is trained and every trainer is done.
//
// Elastic: trainers may die and come back, join late or leave early, and
// the server trains on (docs/guide/failures.md):
//   tessera-run --standalone --nproc_per_node 3 --elastic_roles trainer
//       --max_restarts 3 parameter_server --epochs 1
// then `kill -9` a trainer: tessera-run starts it again alone, it rejoins
// and leases the next batch. `tessera-run --join --master_port P
// parameter_server` adds a trainer to a running job (give both the same
// TESSERA_JOB_SECRET). (Command lines are one line each; a backslash would
// end a // comment's line in C++.) `parameter_server --help` lists the flags.
#include <ATen/ops/index_select.h>
#include <ATen/ops/tensor.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/status.h"
#include "data/fashion_mnist.h"
#include "dist_optim/distributed_optimizer.h"
#include "examples/common/dist_training.h"
#include "examples/common/remote_parameters.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"
#include "examples/parameter_server/batch_plan.h"
#include "examples/parameter_server/parameter_server.h"
#include "tessera/worker.h"

ABSL_FLAG(std::string, optimizer, "adam", "adam, or sgd (momentum 0.9)");
ABSL_FLAG(int64_t, leave_after_steps, 0,
          "a trainer leaves the job (Worker::Leave) after this many steps; 0: it trains until "
          "the batches run out");

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

// Unix time in seconds, for lines a benchmark lines up with its own clock.
double UnixSeconds() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

// A lease as it travels: {epoch, step, steps in all, indices...}; empty
// when training is over.
std::vector<int64_t> ToWire(const std::optional<Batch>& batch, int64_t steps_total) {
  if (!batch.has_value()) return {};
  std::vector<int64_t> wire = {batch->epoch, batch->step, steps_total};
  wire.insert(wire.end(), batch->indices.begin(), batch->indices.end());
  return wire;
}

// The server's log of the job's membership: each change, and how long a
// failed trainer took to train again (its new incarnation's first lease).
class MembershipLog {
 public:
  void OnEvent(const rpc::MembershipEvent& event) {
    MutexLock lock(&mu_);
    std::printf(
        "[ps] %.3f: %s (rank %d) %s%s\n", UnixSeconds(), event.name.c_str(), event.rank,
        rpc::MembershipEventName(event.kind),
        event.incarnation > 0 ? absl::StrCat(", incarnation ", event.incarnation).c_str() : "");
    std::fflush(stdout);
    if (event.kind == rpc::MembershipEventKind::kFailed) failed_at_[event.name] = event.at;
  }
  void OnLease(const std::string& trainer) {
    MutexLock lock(&mu_);
    auto it = failed_at_.find(trainer);
    if (it == failed_at_.end()) return;
    std::printf("[ps] %s training again %.2f s after it failed\n", trainer.c_str(),
                absl::ToDoubleSeconds(absl::Now() - it->second));
    std::fflush(stdout);
    failed_at_.erase(it);
  }

 private:
  Mutex mu_;
  std::map<std::string, absl::Time> failed_at_ ABSL_GUARDED_BY(mu_);
};

// Rank 0: serves the model and the batch plan until every batch is trained
// and every trainer is done, then evaluates. Trainers may fail, come back,
// join and leave meanwhile.
int RunServer(WorkerOptions options, const TrainingFlags& flags) {
  const auto start = Clock::now();
  const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
  const int64_t samples = data::LoadFashionMnist(data::Split::kTrain).labels.size(0);
  auto worker = Worker::Start(options);
  auto server = std::make_shared<ParameterServer>(flags.seed);
  auto plan =
      std::make_shared<BatchPlan>(samples, flags.batch, flags.epochs, flags.seed, flags.max_steps);
  auto log = std::make_shared<MembershipLog>();
  // The server owns the training state: it saves it, and resumes from it
  // when tessera-run restarts the group (examples/common/resume.h).
  auto resume = std::make_shared<Resume>(flags, "parameter_server", /*writer=*/true);
  if (resume->last().has_value()) {
    server->Load(resume->last()->tensors);
    const at::Tensor position = resume->last()->tensors.at("plan").contiguous();
    const int64_t* begin = position.data_ptr<int64_t>();
    plan->Restore(std::vector<int64_t>(begin, begin + position.numel()));
    resume->Start("ps");
  }
  auto saving = std::make_shared<Mutex>();
  worker->membership().Subscribe([plan, log](const rpc::MembershipEvent& event) {
    log->OnEvent(event);
    if (event.kind == rpc::MembershipEventKind::kFailed ||
        event.kind == rpc::MembershipEventKind::kLeft) {
      plan->Release(event.name, event.incarnation);
    }
  });
  worker->Register("parameters",
                   [server](rpc::CallContext& ctx) { return server->Parameters(ctx); });
  worker->Register("forward", [server](at::Tensor images) { return server->Forward(images); });
  worker->Register(
      "next_batch",
      [server, plan, log, resume, saving](rpc::CallContext& ctx,
                                          bool more) -> absl::StatusOr<std::vector<int64_t>> {
        const rpc::WorkerInfo caller = ctx.runtime->GetWorkerInfo(ctx.caller_rank);
        int64_t acked = 0;
        TESSERA_ASSIGN_OR_RETURN(
            auto batch, plan->Next(caller.name, caller.incarnation, more, ctx.deadline, &acked));
        if (resume->Due(acked)) {
          MutexLock lock(saving.get());
          std::map<std::string, at::Tensor> tensors = server->Snapshot();
          const std::vector<int64_t> position = plan->Position();
          tensors["plan"] = at::tensor(position);
          const int64_t done = position[0];
          resume->Save("ps", std::move(tensors),
                       {done / plan->steps_per_epoch(), done % plan->steps_per_epoch(), 0, {}});
        }
        if (batch.has_value()) log->OnLease(caller.name);
        return ToWire(batch, plan->steps_total());
      });
  std::printf("[ps] pid %d serving a CNN to %d trainers, %lld steps in all\n",
              static_cast<int>(getpid()), worker->world_size() - 1,
              static_cast<long long>(plan->steps_total()));
  std::fflush(stdout);
  worker->Shutdown();  // returns once every trainer still in the job has shut down
  std::string by_trainer;
  for (const auto& [name, steps] : plan->StepsByTrainer()) {
    absl::StrAppend(&by_trainer, by_trainer.empty() ? "" : ", ", name, " ", steps);
  }
  std::printf("[ps] steps trained: %lld of %lld (%s); forward passes: %lld\n",
              static_cast<long long>(plan->steps_done()),
              static_cast<long long>(plan->steps_total()), by_trainer.c_str(),
              static_cast<long long>(server->forwards()));
  // --test_images, as in every example: the whole test set is 53 GFLOP of
  // forward passes on one thread, 15 s of a 2-core machine.
  const double seconds = SecondsSince(start);  // training's, not the evaluation's
  const int64_t images = TestImages(test, flags.test_images);
  const double accuracy =
      server->Accuracy(test.images.narrow(0, 0, images), test.labels.narrow(0, 0, images));
  std::printf("[ps] pid %d: test accuracy %.2f%% (%lld images) after %d epochs, %.1f s\n",
              static_cast<int>(getpid()), 100 * accuracy, static_cast<long long>(images),
              flags.epochs, seconds);
  return 0;
}

// Ranks 1..: train on the batches the server hands out, until there are
// none left (or, with --leave_after_steps, leave the job early).
int RunTrainer(WorkerOptions options, const TrainingFlags& flags) {
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  auto worker = Worker::Start(options);
  auto params = worker->RpcSync<std::vector<rref::RRef<at::Tensor>>>("ps", "parameters");
  auto optimizer =
      dist_optim::DistributedOptimizer::Create(worker->rrefs(), params, OptimizerFor(flags));
  // This trainer's optimizer state lives on the server (a LocalOptimizer of
  // its own): it saves it itself, and a new process of it — a restart alone
  // or of the group — takes it back.
  Resume own(flags, "parameter_server." + worker->name(), /*writer=*/true);
  if (own.last().has_value()) LoadOptimizerState(optimizer, own.last()->tensors, "optimizer.");
  const int64_t leave_after = absl::GetFlag(FLAGS_leave_after_steps);
  int64_t trained = 0;
  double window_loss = 0;
  int64_t window_steps = 0;
  while (leave_after == 0 || trained < leave_after) {
    const auto lease = worker->RpcSync<std::vector<int64_t>>("ps", "next_batch", true);
    if (lease.empty()) break;
    const int64_t epoch = lease[0], step = lease[1], steps_total = lease[2];
    at::Tensor index = at::tensor(std::vector<int64_t>(lease.begin() + 3, lease.end()));
    window_loss +=
        DistAutogradStep(worker->autograd(), optimizer, train.labels.index_select(0, index), [&] {
          return worker->RpcSync<at::Tensor>("ps", "forward", train.images.index_select(0, index));
        });
    ++window_steps;
    ++trained;
    if (own.Due(trained)) {
      own.Save(worker->name(), FetchOptimizerState(optimizer, "optimizer."), {0, trained, 0, {}},
               /*announce=*/false);
    }
    if ((step + 1) % flags.log_every == 0 || step + 1 == steps_total) {
      const int64_t per_epoch = steps_total / flags.epochs;
      std::printf("[%s] epoch %lld step %lld/%lld: loss %.4f\n", worker->name().c_str(),
                  static_cast<long long>(epoch + 1), static_cast<long long>(step % per_epoch + 1),
                  static_cast<long long>(per_epoch), window_loss / window_steps);
      std::fflush(stdout);
      window_loss = 0;
      window_steps = 0;
    }
  }
  if (leave_after > 0 && trained >= leave_after) {
    worker->RpcSync<std::vector<int64_t>>("ps", "next_batch", false);  // acknowledges the last
    std::printf("[%s] leaving the job after %lld steps\n", worker->name().c_str(),
                static_cast<long long>(trained));
    std::fflush(stdout);
    worker->Leave("done after --leave_after_steps");
    return 0;
  }
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
        options.role = options.rank == 0 ? "ps" : "trainer";
        return options.rank == 0 ? examples::RunServer(options, flags)
                                 : examples::RunTrainer(options, flags);
      });
}
