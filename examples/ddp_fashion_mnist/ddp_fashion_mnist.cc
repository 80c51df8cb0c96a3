// Data-parallel training of a CNN on Fashion-MNIST (Debian's
// dataset-fashion-mnist): each rank trains on its DistributedSampler shard,
// DistributedDataParallel averages the gradients, rank 0 reports progress
// per epoch and the final test accuracy.
//
//   bazel-bin/launcher/tessera-run --nproc_per_node 2 --standalone
//       bazel-bin/examples/ddp_fashion_mnist/ddp_fashion_mnist --epochs 4
// With --checkpoint_dir D (and tessera-run --max_restarts 1), rank 0 saves
// the model, the optimizer state and the position every --checkpoint_every
// steps, and a restarted group resumes from the last checkpoint — with
// fewer ranks too, when tessera-run restarts it without a lost node.
// (one command line; a backslash would end a // comment's line in C++).
// `ddp_fashion_mnist --help` lists the flags.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/flags/flag.h"
#include "checkpoint/optimizer_state.h"
#include "collectives/gloo/gloo_process_group.h"
#include "data/fashion_mnist.h"
#include "ddp/comm_hook.h"
#include "ddp/distributed_data_parallel.h"
#include "ddp/distributed_sampler.h"
#include "ddp/zero_redundancy_optimizer.h"
#include "examples/common/fashion_cnn.h"
#include "examples/common/resume.h"
#include "examples/common/training.h"

ABSL_FLAG(bool, zero, false, "shard Adam's state across the ranks (ddp::ZeroRedundancyOptimizer)");
ABSL_FLAG(bool, zero_overlap, false,
          "with --zero: step each gradient bucket's shard as its average arrives, in DDP's hook");
ABSL_FLAG(double, bucket_cap_mb, 25,
          "most MiB of gradients per bucket (the first bucket: at most 1, as PyTorch's DDP)");
ABSL_FLAG(std::string, comm_hook, "allreduce",
          "how gradient buckets travel: allreduce, fp16, bf16, powersgd or powersgd:R");

namespace {

using Net = tessera::examples::FashionCnn;

// What a checkpoint holds: the model's parameters and buffers by name, and
// the optimizer's state (every rank holds the same; rank 0 saves them).
std::map<std::string, torch::Tensor> Capture(const Net& net, const torch::optim::Adam& optimizer) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& item : net->named_parameters()) tensors["model." + item.key()] = item.value();
  for (const auto& item : net->named_buffers()) tensors["model." + item.key()] = item.value();
  tensors["optimizer"] = tessera::checkpoint::SaveOptimizerState(optimizer);
  return tensors;
}

void Restore(const tessera::checkpoint::Checkpoint& last, Net& net, torch::optim::Adam& optimizer) {
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor& into) {
    auto it = last.tensors.find("model." + name);
    tessera::examples::Require(it != last.tensors.end(),
                               "the checkpoint has no tensor model." + name);
    into.copy_(it->second);
  };
  for (auto& item : net->named_parameters()) load(item.key(), item.value());
  for (auto& item : net->named_buffers()) load(item.key(), item.value());
  tessera::checkpoint::LoadOptimizerState(optimizer, last.tensors.at("optimizer"));
}

int Train(const tessera::examples::TrainingFlags& flags) {
  const auto train = tessera::data::LoadFashionMnist(tessera::data::Split::kTrain);
  const auto test = tessera::data::LoadFashionMnist(tessera::data::Split::kTest);
  auto env = tessera::collectives::CreateGlooProcessGroupFromEnv();
  tessera::collectives::ProcessGroup* group = env.group.get();
  const int rank = group->rank();
  const int world = group->size();
  const std::string who = "ddp";

  torch::manual_seed(static_cast<uint64_t>(flags.seed));
  Net net;
  torch::optim::Adam optimizer(net->parameters(), torch::optim::AdamOptions(flags.lr));
  // Every rank reads the last checkpoint; rank 0 writes them.
  tessera::examples::Resume resume(flags, "ddp_fashion_mnist", rank == 0);
  if (resume.last().has_value()) Restore(*resume.last(), net, optimizer);
  const tessera::checkpoint::TrainingPosition start_at = resume.Start(who);
  if (rank == 0) {
    std::printf("[%s] %d ranks\n", who.c_str(), world);
    std::fflush(stdout);
  }
  tessera::ddp::DdpOptions ddp_options;
  ddp_options.comm_hook = tessera::ddp::CommHookNamed(absl::GetFlag(FLAGS_comm_hook));
  ddp_options.bucket_cap_mb = absl::GetFlag(FLAGS_bucket_cap_mb);
  ddp_options.first_bucket_cap_mb =
      std::min(ddp_options.first_bucket_cap_mb, ddp_options.bucket_cap_mb);
  tessera::examples::Require(ddp_options.comm_hook != nullptr,
                             "--comm_hook: allreduce, fp16, bf16, powersgd or powersgd:R");
  // With --zero each rank keeps Adam's state for its shard only.
  std::unique_ptr<tessera::ddp::ZeroRedundancyOptimizer> zero;
  if (absl::GetFlag(FLAGS_zero)) {
    tessera::examples::Require(flags.checkpoint_dir.empty(),
                               "--zero does not take --checkpoint_dir (sharded state)");
    tessera::ddp::ZeroOptions zero_options;
    zero_options.overlap_with_ddp = absl::GetFlag(FLAGS_zero_overlap);
    zero = std::make_unique<tessera::ddp::ZeroRedundancyOptimizer>(
        net->parameters(), group,
        [&](std::vector<at::Tensor> shard) {
          return std::make_unique<torch::optim::Adam>(std::move(shard),
                                                      torch::optim::AdamOptions(flags.lr));
        },
        zero_options);
    if (zero_options.overlap_with_ddp) {
      tessera::examples::Require(absl::GetFlag(FLAGS_comm_hook) == "allreduce",
                                 "--zero_overlap is itself the communication hook: no --comm_hook");
      ddp_options.comm_hook = zero->OverlapHook();
    }
  }
  auto ddp = tessera::ddp::DistributedDataParallel::Create(net.ptr(), group, ddp_options);

  tessera::ddp::DistributedSampler sampler(static_cast<size_t>(train.labels.size(0)),
                                           {world, rank, /*shuffle=*/true, /*seed=*/1, false});
  const int64_t per_epoch =
      (static_cast<int64_t>(sampler.num_samples()) + flags.batch - 1) / flags.batch;
  const int64_t steps = flags.max_steps > 0 ? std::min(flags.max_steps, per_epoch) : per_epoch;
  const auto start = std::chrono::steady_clock::now();
  for (int epoch = static_cast<int>(start_at.epoch); epoch < flags.epochs; ++epoch) {
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    net->train();
    double loss_sum = 0, window_loss = 0;
    int64_t batches = 0, window = 0;
    int64_t step = 0;
    // Resuming mid-epoch: the samples before the checkpoint were trained,
    // re-sharded over this group, which may have fewer ranks than the one
    // that saved it (a group restarted without a lost node).
    const int64_t resume_step = start_at.samples_seen > 0
                                    ? start_at.samples_seen / (flags.batch * world)
                                    : start_at.step;
    for (; epoch == start_at.epoch && step < resume_step; ++step) {
      sampler.next(static_cast<size_t>(flags.batch));
    }
    while (step < steps) {
      auto indices = sampler.next(static_cast<size_t>(flags.batch));
      if (!indices) break;
      std::vector<int64_t> idx(indices->begin(), indices->end());
      auto index = torch::tensor(idx);
      auto x = train.images.index_select(0, index);
      auto y = train.labels.index_select(0, index);
      if (zero != nullptr)
        zero->ZeroGrad();
      else
        optimizer.zero_grad();
      auto loss = torch::cross_entropy_loss(net->forward(x), y);
      loss.backward();
      if (zero != nullptr)
        zero->Step();
      else
        optimizer.step();
      loss_sum += loss.item<double>();
      window_loss += loss.item<double>();
      ++batches;
      ++window;
      ++step;
      if (rank == 0 && (step % flags.log_every == 0 || step == steps)) {
        std::printf("epoch %d step %lld/%lld: loss %.4f\n", epoch + 1, static_cast<long long>(step),
                    static_cast<long long>(steps), window_loss / window);
        std::fflush(stdout);
        window_loss = 0;
        window = 0;
      }
      if (resume.Due(epoch * steps + step)) {
        resume.Save(who, Capture(net, optimizer), {epoch, step, step * flags.batch * world, {}});
      }
    }
    const double seconds = tessera::examples::SecondsSince(start);
    if (rank == 0 && batches > 0) {
      std::printf("epoch %d: mean loss %.4f, %.0f samples/s per rank, %.0f s elapsed\n", epoch + 1,
                  loss_sum / batches, batches * flags.batch * (epoch + 1) / seconds, seconds);
      std::fflush(stdout);
    }
  }
  if (rank == 0 && zero != nullptr) {
    int64_t mine = 0, all = 0;
    for (size_t i = 0; i < net->parameters().size(); ++i) {
      all += net->parameters()[i].numel();
      if (zero->OwnerOf(i) == rank) mine += net->parameters()[i].numel();
    }
    std::printf("ZeRO: rank 0 held Adam's state for %lld of %lld parameters (%lld bytes)\n",
                static_cast<long long>(mine), static_cast<long long>(all),
                static_cast<long long>(zero->StateBytes()));
  }
  // Every rank leaves together, before rank 0 evaluates (longer than a
  // collective's timeout may be): without tessera-run, rank 0 hosts the
  // store the others use.
  group->Barrier().Get(absl::Seconds(120));
  if (rank == 0) {
    net->eval();
    const double accuracy = tessera::examples::TestAccuracy(
        test, flags.test_images, [&](const at::Tensor& images) { return net->forward(images); });
    std::printf("test accuracy %.2f%% after %d epochs\n", 100 * accuracy, flags.epochs);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tessera::examples::RunExample(
      argc, argv,
      "Data-parallel (DDP over Gloo) training of a CNN on Fashion-MNIST; run it "
      "with tessera-run --nproc_per_node N.",
      Train);
}
