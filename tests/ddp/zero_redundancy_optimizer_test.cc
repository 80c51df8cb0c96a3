// ZeroRedundancyOptimizer over two real ranks (Gloo): DDP + ZeRO(Adam) ends
// with the same parameters as DDP + Adam, while each rank holds Adam's state
// for its shard only.
#include "ddp/zero_redundancy_optimizer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "checkpoint/optimizer_state.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

constexpr int kSteps = 5;

std::shared_ptr<torch::nn::SequentialImpl> Model() {
  torch::manual_seed(7);
  return std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(12, 32), torch::nn::Tanh(),
                                                     torch::nn::Linear(32, 16), torch::nn::Tanh(),
                                                     torch::nn::Linear(16, 4));
}

std::unique_ptr<torch::optim::Optimizer> Adam(std::vector<at::Tensor> params) {
  return std::make_unique<torch::optim::Adam>(std::move(params), torch::optim::AdamOptions(0.01));
}

// kSteps on each rank's own data: `sharded` under DDP + `zero`, `plain`
// under DDP + Adam; OK if both end with the same parameters.
absl::Status TrainAndCompare(collectives::ProcessGroup& group, torch::nn::SequentialImpl& sharded,
                             ddp::ZeroRedundancyOptimizer& zero, torch::nn::SequentialImpl& plain) {
  auto adam = Adam(plain.parameters());
  auto forward = [](torch::nn::SequentialImpl& m, const torch::Tensor& x) { return m.forward(x); };
  for (int step = 0; step < kSteps; ++step) {
    torch::manual_seed(100 * step + group.rank());  // each rank its own data
    const torch::Tensor x = torch::randn({8, 12}), y = torch::randn({8, 4});
    zero.ZeroGrad();
    torch::mse_loss(forward(sharded, x), y).backward();  // with overlap, the steps are here
    zero.Step();
    adam->zero_grad();
    torch::mse_loss(forward(plain, x), y).backward();
    adam->step();
  }
  const auto got = sharded.parameters(), want = plain.parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    if (!torch::allclose(got[i], want[i], 1e-5, 1e-6)) {
      return absl::InternalError(absl::StrCat("rank ", group.rank(), ": parameter ", i,
                                              " differs from DDP + Adam by ",
                                              (got[i] - want[i]).abs().max().item<float>()));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroMatchesPlainAdamWithStateSharded(collectives::ProcessGroup& group) {
  auto sharded = Model();
  auto plain = Model();
  auto sharded_ddp = ddp::DistributedDataParallel::Create(sharded, &group, {});
  auto plain_ddp = ddp::DistributedDataParallel::Create(plain, &group, {});
  ddp::ZeroRedundancyOptimizer zero(sharded->parameters(), &group, Adam);
  absl::Status same = TrainAndCompare(group, *sharded, zero, *plain);
  if (!same.ok()) return same;
  const auto got = sharded->parameters();
  // Adam's state exists for this rank's shard and nothing else, with the
  // shapes of those parameters; the shards cover every parameter once.
  const auto& shard = zero.shard();
  const auto& state = zero.local_optimizer().state();
  if (shard.empty() || state.size() != shard.size()) {
    return absl::InternalError(absl::StrCat("rank ", group.rank(), " holds state for ",
                                            state.size(), " parameters, its shard has ",
                                            shard.size()));
  }
  int64_t shard_numel = 0, moments_numel = 0;
  for (size_t index : shard) {
    const at::Tensor& p = got[index];
    shard_numel += p.numel();
    auto it = state.find(c10::guts::to_string(p.unsafeGetTensorImpl()));
    if (it == state.end()) {
      return absl::InternalError(absl::StrCat("no Adam state for owned parameter ", index));
    }
    const auto& moments = static_cast<const torch::optim::AdamParamState&>(*it->second);
    if (!moments.exp_avg().sizes().equals(p.sizes())) {
      return absl::InternalError(absl::StrCat("Adam state of parameter ", index, " has shape ",
                                              c10::str(moments.exp_avg().sizes())));
    }
    moments_numel += moments.exp_avg().numel() + moments.exp_avg_sq().numel();
  }
  int64_t total = 0;
  for (const auto& p : got) total += p.numel();
  // Balanced by size: the two largest weights (32 x 16 = 512, 12 x 32 = 384;
  // of 1,012) on different ranks; neither holds more than 60%.
  if (moments_numel != 2 * shard_numel || shard_numel > total * 6 / 10) {
    return absl::InternalError(absl::StrCat("rank ", group.rank(), " holds moments for ",
                                            moments_numel, " elements, shard ", shard_numel, " of ",
                                            total));
  }
  auto full = Adam(plain->parameters());  // a plain Adam's state, stepped once
  full->zero_grad();
  torch::mse_loss(plain->forward(torch::randn({8, 12})), torch::randn({8, 4})).backward();
  full->step();
  const int64_t plain_bytes = checkpoint::SaveOptimizerState(*full).numel();
  if (zero.StateBytes() >= plain_bytes) {
    return absl::InternalError(absl::StrCat("sharded state ", zero.StateBytes(),
                                            " bytes, not below the plain optimizer's ",
                                            plain_bytes));
  }
  return absl::OkStatus();
}

// overlap_with_ddp: each bucket's owned parameters step in DDP's hook during
// backward; after N steps the same parameters as DDP + Adam, and Step()
// has nothing left to do.
absl::Status OverlappedZeroMatchesPlainAdam(collectives::ProcessGroup& group) {
  auto sharded = Model();
  auto plain = Model();
  ddp::ZeroOptions zero_options;
  zero_options.overlap_with_ddp = true;
  ddp::ZeroRedundancyOptimizer zero(sharded->parameters(), &group, Adam, zero_options);
  ddp::DdpOptions ddp_options;
  ddp_options.comm_hook = zero.OverlapHook();
  ddp_options.first_bucket_cap_mb = 0.001;  // several buckets, so steps overlap backward
  ddp_options.bucket_cap_mb = 0.002;
  auto sharded_ddp = ddp::DistributedDataParallel::Create(sharded, &group, ddp_options);
  auto plain_ddp = ddp::DistributedDataParallel::Create(plain, &group, {});
  if (sharded_ddp->num_buckets() < 2) return absl::InternalError("expected several buckets");
  absl::Status same = TrainAndCompare(group, *sharded, zero, *plain);
  if (!same.ok()) return same;
  const auto got = sharded->parameters();
  if (sharded_ddp->last_pass().launched_before_last_gradient < 1) {
    return absl::InternalError("no bucket (so no step) started before backward's last gradient");
  }
  int64_t owned = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (zero.OwnerOf(i) != group.rank()) continue;
    ++owned;
    if (zero.parameter_optimizer(i).state().size() != 1) {
      return absl::InternalError(absl::StrCat("owned parameter ", i, " has no Adam state"));
    }
  }
  if (owned == 0 || owned == static_cast<int64_t>(got.size())) {
    return absl::InternalError(
        absl::StrCat("rank ", group.rank(), " owns ", owned, " of ", got.size(), " parameters"));
  }
  return absl::OkStatus();
}

class ZeroRedundancyOptimizerTest : public TwoRankGlooTest {};
TESSERA_TWO_RANK_TEST(ZeroRedundancyOptimizerTest, OverlappedWithDdpMatchesPlainAdam,
                      OverlappedZeroMatchesPlainAdam)
TESSERA_TWO_RANK_TEST(ZeroRedundancyOptimizerTest, MatchesPlainAdamWithStateSharded,
                      ZeroMatchesPlainAdamWithStateSharded)

TEST(PartitionBySize, LargestFirstToTheLightestRank) {
  // 100 -> rank 0, 60 -> rank 1, 50 -> rank 1 (60 < 100), 10 -> rank 0 (100 < 110).
  auto shards = ddp::PartitionBySize({10, 100, 50, 60}, 2);
  EXPECT_EQ(shards[0], (std::vector<size_t>{0, 1}));
  EXPECT_EQ(shards[1], (std::vector<size_t>{2, 3}));
  // More ranks than parameters: some shards are empty.
  shards = ddp::PartitionBySize({5}, 3);
  EXPECT_EQ(shards[0], (std::vector<size_t>{0}));
  EXPECT_TRUE(shards[1].empty() && shards[2].empty());
}

}  // namespace
}  // namespace tessera::testing
