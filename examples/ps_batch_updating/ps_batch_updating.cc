// The batch-updating parameter server (PyTorch's "Batch RPC processing"
// tutorial) on Fashion-MNIST, sharded (ps/): ranks 0..S-1 are the servers
// ps0.., each holding its shard of every parameter of the CNN; the other
// ranks are trainers, which compute. A trainer step: pull the parameters
// (a pull at clock c waits until every trainer's gradients of clock c-1 were
// averaged and applied once, by Adam on the servers: synchronous tables,
// see Note [Parameter-server consistency], ps/shard.h), forward and backward on
// its own batch, push the gradients, end its clock. Every trainer evaluates
// the final model: the job's result does not depend on any one of them.
//
//   tessera-run --standalone --nproc_per_node 4 ps_batch_updating --servers 2 --epochs 2
// (one command line). `ps_batch_updating --help` lists the flags.
#include <ATen/ops/arange.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <torch/csrc/autograd/autograd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "data/fashion_mnist.h"
#include "ddp/distributed_sampler.h"
#include "examples/common/cnn.h"
#include "examples/common/training.h"
#include "ps/dense_parameters.h"
#include "ps/ps_client.h"
#include "ps/ps_server.h"
#include "tessera/worker.h"

ABSL_FLAG(int, servers, 2, "how many of the ranks are parameter servers (the first ones)");

namespace tessera::examples {
namespace {

const char* const kParameterNames[] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                       "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};

// One synchronous dense table per parameter of cnn.h's CNN, stepped by Adam.
std::vector<ps::TableOptions> CnnTables(const std::vector<at::Tensor>& shapes, double lr) {
  std::vector<ps::TableOptions> tables;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const at::Tensor& weight = shapes[i - i % 2];  // a bias shares its weight's fan-in
    ps::TableOptions table =
        ps::DenseTableFor(kParameterNames[i], shapes[i].sizes(), weight.sizes(), /*seed=*/i + 1);
    table.optimizer = ps::OptimizerOptions::Adam(lr);
    table.consistency = ps::Consistency::Synchronous();
    tables.push_back(table);
  }
  return tables;
}

class Trainer {
 public:
  Trainer(Worker& worker, ps::PsOptions options, std::vector<at::Tensor> params)
      : params_(std::move(params)), tables_(options.tables) {
    client_ = ValueOrThrow(ps::PsClient::Connect(worker.rpc(), std::move(options)));
    for (const ps::TableOptions& table : tables_)
      keys_.push_back(at::arange(table.rows, at::kLong));
  }

  // Pulls the parameters as of this trainer's clock: one call, one message
  // per server.
  void Pull() {
    std::vector<ps::TableKeys> pulls;
    for (size_t i = 0; i < tables_.size(); ++i) pulls.push_back({tables_[i].name, keys_[i], {}});
    std::vector<at::Tensor> rows = client_->Pull(pulls).Get(kTimeout);
    for (size_t i = 0; i < tables_.size(); ++i) ps::CopyFromRows(rows[i], params_[i]);
  }

  // One step: pull, forward and backward here, push, end the clock.
  double Step(const at::Tensor& images, const at::Tensor& labels) {
    Pull();
    at::Tensor loss = at::cross_entropy_loss(CnnForward(params_, images), labels);
    std::vector<at::Tensor> grads = torch::autograd::grad({loss}, params_);
    std::vector<ps::TableKeys> pushes;
    for (size_t i = 0; i < tables_.size(); ++i) {
      pushes.push_back({tables_[i].name, keys_[i], ps::ToRows(grads[i], tables_[i])});
    }
    client_->Push(pushes).Get(kTimeout);
    client_->Clock().Get(kTimeout);
    return loss.item<double>();
  }

  double Accuracy(const data::Examples& test, int64_t count) {
    Pull();
    return TestAccuracy(test, count,
                        [&](const at::Tensor& images) { return CnnForward(params_, images); });
  }

 private:
  static constexpr absl::Duration kTimeout = absl::Minutes(5);
  std::vector<at::Tensor> params_;
  std::vector<ps::TableOptions> tables_;
  std::vector<at::Tensor> keys_;
  std::unique_ptr<ps::PsClient> client_;
};

int Run(const TrainingFlags& flags) {
  const int servers = absl::GetFlag(FLAGS_servers);
  WorkerOptions options = WorkerOptions::FromEnv();
  Require(servers >= 1 && servers < options.world_size,
          "--servers must leave at least one trainer (1 <= servers < world size)");
  const bool server = options.rank < servers;
  options.name =
      server ? absl::StrCat("ps", options.rank) : absl::StrCat("trainer", options.rank - servers);
  if (server) options.role = "server";  // for tessera-run --elastic_roles server
  auto worker = Worker::Start(options);
  std::vector<at::Tensor> params = InitCnn(flags.seed);
  ps::PsOptions ps_options;
  ps_options.job = "cnn";
  for (int s = 0; s < servers; ++s) ps_options.servers.push_back(absl::StrCat("ps", s));
  ps_options.tables = CnnTables(params, flags.lr);
  if (server) {
    auto shards = ValueOrThrow(ps::PsServer::Start(worker->rpc(), ps_options));
    std::printf("[%s] serving its shard of %zu tables to %d trainers\n", worker->name().c_str(),
                ps_options.tables.size(), options.world_size - servers);
    worker->Shutdown();
    return 0;
  }
  const auto train = data::LoadFashionMnist(data::Split::kTrain);
  const auto test = data::LoadFashionMnist(data::Split::kTest);
  Trainer trainer(*worker, ps_options, params);
  ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                  {options.world_size - servers, options.rank - servers,
                                   /*shuffle=*/true, /*seed=*/1, false});
  const auto start = std::chrono::steady_clock::now();
  TrainEpochs(flags, train, sampler, worker->name(),
              [&](const at::Tensor& images, const at::Tensor& labels) {
                return trainer.Step(images, labels);
              });
  const double seconds = SecondsSince(start);
  std::printf("[%s] test accuracy %.2f%% (%lld images) after %d epochs, %.1f s\n",
              worker->name().c_str(), 100 * trainer.Accuracy(test, flags.test_images),
              static_cast<long long>(TestImages(test, flags.test_images)), flags.epochs, seconds);
  worker->Shutdown();
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  return tessera::examples::RunExample(
      argc, argv,
      "The batch-updating parameter server, sharded: the first --servers ranks hold the CNN's "
      "parameters, the others train.\n  tessera-run --standalone --nproc_per_node 4 "
      "ps_batch_updating --servers 2 --epochs 2",
      tessera::examples::Run);
}
