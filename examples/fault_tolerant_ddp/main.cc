// Fault-tolerant data-parallel training of a CNN on Fashion-MNIST
// (ddp/fault_tolerant/fault_tolerant_ddp.h): each replica trains on its own
// shard; at every step the live replicas agree on a quorum, average their
// gradients over it and step together. Kill a replica (kill -9) and the
// others go on without it; tessera-run starts it again alone, and it
// rejoins at a step boundary with the parameters and optimizer state of a
// live peer:
//
//   tessera-run --standalone --nproc_per_node 3 --elastic_roles replica
//       --max_restarts 3 fault_tolerant_ddp --steps 600
// (one command line; a backslash would end a // comment's line in C++).
#include <ATen/ops/index_select.h>
#include <ATen/ops/tensor.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "data/fashion_mnist.h"
#include "ddp/fault_tolerant/env_replica.h"
#include "ddp/fault_tolerant/fault_tolerant_ddp.h"
#include "examples/common/fashion_cnn.h"
#include "examples/common/training.h"

ABSL_FLAG(int64_t, steps, 600, "steps to train (committed by the quorum)");
ABSL_FLAG(double, quorum_timeout_s, 3,
          "seconds a step's quorum waits for a replica of the last one before going on "
          "without it");
ABSL_FLAG(int, min_replicas, 0,
          "a step's quorum commits only with at least this many replicas (0: a majority of "
          "those the job started with, so two quorums can never both commit)");
ABSL_FLAG(std::string, save, "",
          "where every replica that finishes saves the trained model (torch::save; written "
          "whole, then renamed, so replicas sharing a file system leave one complete copy)");
ABSL_FLAG(double, rejoin_timeout_s, 300,
          "seconds a replica keeps trying to rejoin a quorum that can commit (the store out of "
          "reach, too few replicas) before it gives up");

namespace tessera::examples {
namespace {

// This replica's batches: its shard of the training set (every world-th
// example), shuffled once, taken in order by committed step — so a replica
// that rejoins at step s trains the batch any incarnation of it would.
class Shard {
 public:
  Shard(int64_t samples, int rank, int world, int64_t batch) : batch_(batch) {
    for (int64_t i = rank; i < samples; i += world) indices_.push_back(i);
    std::mt19937_64 random(static_cast<uint64_t>(rank) + 1);
    std::shuffle(indices_.begin(), indices_.end(), random);
  }
  at::Tensor BatchAt(int64_t step) const {
    std::vector<int64_t> batch;
    const int64_t n = static_cast<int64_t>(indices_.size());
    for (int64_t i = 0; i < batch_; ++i) batch.push_back(indices_[(step * batch_ + i) % n]);
    return at::tensor(batch);
  }

 private:
  const int64_t batch_;
  std::vector<int64_t> indices_;
};

// FNV-1a over every parameter's bytes: replicas with identical parameters
// print the same.
uint64_t Fingerprint(torch::nn::Module& model) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& param : model.parameters()) {
    const at::Tensor p = param.detach().contiguous();
    const auto* bytes = static_cast<const unsigned char*>(p.data_ptr());
    for (size_t i = 0; i < p.nbytes(); ++i) hash = (hash ^ bytes[i]) * 1099511628211ull;
  }
  return hash;
}

int Train(const TrainingFlags& flags) {
  const data::Examples train = data::LoadFashionMnist(data::Split::kTrain);
  // tessera-run --elastic_roles replica restarts a dead replica alone.
  const ddp::EnvReplica replica = ValueOrThrow(ddp::ConnectReplicaFromEnv());
  const std::string& who = replica.id;

  torch::manual_seed(flags.seed);
  FashionCnn net;
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  ddp::FaultTolerantOptions options;
  options.replica_id = who;
  options.quorum.initial_replicas = replica.world_size;
  options.quorum.min_replicas = absl::GetFlag(FLAGS_min_replicas);
  options.quorum.timeout = absl::Seconds(absl::GetFlag(FLAGS_quorum_timeout_s));
  options.quorum.rejoin_timeout = absl::Seconds(absl::GetFlag(FLAGS_rejoin_timeout_s));
  options.gloo.timeout = absl::Seconds(10);
  ddp::FaultTolerantDdp ft(replica.store.get(), *net, optimizer, options);

  const Shard shard(train.labels.size(0), replica.rank, replica.world_size, flags.batch);
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  double window_loss = 0;
  int64_t window = 0;
  absl::Duration coordination;
  int64_t attempts = 0;
  const absl::Time training = absl::Now();
  while (ft.step() < steps) {
    const int64_t step = ft.step();
    const ddp::FaultTolerantStep result = ft.Step([&] {
      // The batch of the step this replica is at; one that recovers in this
      // step takes its peer's count afterwards, and its gradients count for
      // nothing (fault_tolerant_ddp.h).
      const at::Tensor index = shard.BatchAt(step);
      auto loss = torch::nn::functional::cross_entropy(
          net->forward(train.images.index_select(0, index)), train.labels.index_select(0, index));
      loss.backward();
      return loss.item<double>();
    });
    coordination += result.coordination;
    ++attempts;
    if (result.recovered) {
      std::printf("[%s] recovered the state at step %lld from a live peer\n", who.c_str(),
                  static_cast<long long>(result.step));
    }
    if (!result.committed) {
      std::printf("[%s] step %lld dropped: a replica failed; retrying\n", who.c_str(),
                  static_cast<long long>(result.step));
      std::fflush(stdout);
      continue;
    }
    window_loss += result.loss;
    ++window;
    if (ft.step() % flags.log_every == 0 || ft.step() == steps) {
      std::printf("[%s] step %lld/%lld: loss %.4f, %d replicas\n", who.c_str(),
                  static_cast<long long>(ft.step()), static_cast<long long>(steps),
                  window_loss / window, result.replicas);
      std::fflush(stdout);
      window_loss = 0;
      window = 0;
    }
  }
  const double step_ms =
      absl::ToDoubleMilliseconds(absl::Now() - training) / static_cast<double>(attempts);
  std::printf("[%s] parameters %016" PRIx64
              " after %lld steps; a step took %.1f ms, of which the quorum and commit "
              "waited %.2f ms\n",
              who.c_str(), Fingerprint(*net), static_cast<long long>(ft.step()), step_ms,
              absl::ToDoubleMilliseconds(coordination) / static_cast<double>(attempts));
  // The job's result is every survivor's, not rank 0's alone: the replicas
  // hold the same parameters, and whichever machines are lost, those that
  // finish evaluate and save (issue 51).
  {
    const data::Examples test = data::LoadFashionMnist(data::Split::kTest);
    net->eval();
    const double accuracy = TestAccuracy(
        test, flags.test_images, [&](const at::Tensor& images) { return net->forward(images); });
    std::printf("[%s] test accuracy %.2f%% after %lld steps\n", who.c_str(), 100 * accuracy,
                static_cast<long long>(ft.step()));
  }
  if (const std::string path = absl::GetFlag(FLAGS_save); !path.empty()) {
    const std::string partial = absl::StrCat(path, ".", who, ".partial");
    torch::save(net, partial);
    std::filesystem::rename(partial, path);
    std::printf("[%s] saved the model (parameters %016" PRIx64 ") to %s\n", who.c_str(),
                Fingerprint(*net), path.c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace tessera::examples

int main(int argc, char** argv) {
  return tessera::examples::RunExample(
      argc, argv,
      "Fault-tolerant data-parallel training of a CNN on Fashion-MNIST; run it with "
      "tessera-run --nproc_per_node N --elastic_roles replica --max_restarts K.",
      tessera::examples::Train);
}
