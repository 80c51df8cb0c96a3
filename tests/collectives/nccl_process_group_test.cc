// ProcessGroup conformance over NCCL, the suite the Gloo backend passes:
// at world size 1 on one GPU (NCCL refuses two ranks on one device), and at
// 2 and 3 where that many GPUs are visible; rank 0 is this process, the
// others children. Then the failure modes. Tests that need more GPUs than
// are visible skip, saying so; without any GPU, the one check left is that
// asking for the backend is a clear error rather than a crash.
#include "collectives/nccl/nccl_process_group.h"

#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>

#include "ddp/distributed_data_parallel.h"
#include "tests/collectives/process_group_conformance.h"

namespace tessera::testing {
namespace {

absl::StatusOr<collectives::EnvProcessGroup> ChildGroup() {
  collectives::NcclOptions options;
  options.timeout = absl::Seconds(60);
  return collectives::CreateNcclProcessGroupFromEnv(options);
}

TESSERA_WORKER_SCENARIO(nccl_conformance) { return RunChildRank(ChildGroup(), RunConformance); }

// Joins, then dies before the first collective.
TESSERA_WORKER_SCENARIO(nccl_dies) { std::_Exit(ChildGroup().ok() ? 0 : 1); }

// Sends rank 0 a message with tag 8 (rank 0 expects tag 7).
TESSERA_WORKER_SCENARIO(nccl_sends_tag_8) {
  return RunChildRank(ChildGroup(), [](collectives::ProcessGroup& pg) {
    return Done(pg.Send(at::full({5}, 1.0f), 0, 8));
  });
}

// Skips the test unless `gpus` GPUs are visible.
#define SKIP_UNLESS_GPUS(gpus)                                                 \
  if (const int visible = collectives::VisibleCudaDevices(); visible < (gpus)) \
  GTEST_SKIP() << "needs " << (gpus) << " GPU(s), " << visible << " visible"

class NcclProcessGroupTest : public ::testing::TestWithParam<int> {
 protected:
  ProcessGroupWorld world_;
};

TEST_F(NcclProcessGroupTest, WithoutAGpuTheBackendIsAClearError) {
  if (collectives::VisibleCudaDevices() > 0) GTEST_SKIP() << "a GPU is visible";
  const absl::Status pg =
      StatusOf([&] { collectives::CreateNcclProcessGroup(world_.store(), 0, 1); });
  EXPECT_EQ(pg.code(), absl::StatusCode::kFailedPrecondition) << pg;
  EXPECT_NE(pg.message().find("needs a GPU"), std::string::npos) << pg;
}

TEST_P(NcclProcessGroupTest, EveryOpDtypeAndSize) {
  const int world_size = GetParam();
  SKIP_UNLESS_GPUS(world_size);
  world_.StartChildren(world_size, "nccl_conformance");
  auto pg = collectives::CreateNcclProcessGroup(world_.store(), 0, world_size);
  EXPECT_EQ(pg->size(), world_size);
  auto status = RunConformance(*pg);
  EXPECT_TRUE(status.ok()) << status;
  for (auto& child : world_.children()) EXPECT_EQ(child->Wait(absl::Seconds(120)), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, NcclProcessGroupTest, ::testing::Values(1, 2, 3));

// DDP's reducer over NCCL on one GPU: buckets go through the backend
// (staged, averaged over one rank), so training equals plain local training.
TEST_F(NcclProcessGroupTest, DdpAtWorldSizeOneTrainsLikeALocalModel) {
  SKIP_UNLESS_GPUS(1);
  auto pg = collectives::CreateNcclProcessGroup(world_.store(), 0, 1);
  auto make = [] {
    torch::manual_seed(5);
    return std::make_shared<torch::nn::SequentialImpl>(torch::nn::Linear(10, 10), torch::nn::ReLU(),
                                                       torch::nn::Linear(10, 5));
  };
  auto replica = make();
  auto local = make();
  ddp::DdpOptions options;
  options.bucket_cap_mb = 0.0002;  // several buckets
  auto ddp = ddp::DistributedDataParallel::Create(replica, pg.get(), options);
  torch::optim::SGD opt(replica->parameters(), 0.1);
  torch::optim::SGD local_opt(local->parameters(), 0.1);
  const torch::Tensor x = torch::randn({8, 10});
  const torch::Tensor y = torch::randn({8, 5});
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    torch::mse_loss(replica->forward(x), y).backward();
    opt.step();
    local_opt.zero_grad();
    torch::mse_loss(local->forward(x), y).backward();
    local_opt.step();
  }
  auto a = replica->parameters();
  auto b = local->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i], b[i])) << i;
}

// Needs one GPU only: rank 1 never comes.
TEST_F(NcclProcessGroupTest, MissingRankIsATimeoutNotAHang) {
  SKIP_UNLESS_GPUS(1);
  collectives::NcclOptions options;
  options.connect_timeout = absl::Seconds(2);
  const absl::Status pg =
      StatusOf([&] { collectives::CreateNcclProcessGroup(world_.store(), 0, 2, options); });
  EXPECT_EQ(pg.code(), absl::StatusCode::kDeadlineExceeded) << pg;
}

TEST_F(NcclProcessGroupTest, DeadRankFailsTheCollectiveAndBreaksTheGroup) {
  SKIP_UNLESS_GPUS(2);
  world_.StartChildren(2, "nccl_dies");
  collectives::NcclOptions options;
  options.timeout = absl::Seconds(5);
  auto pg = collectives::CreateNcclProcessGroup(world_.store(), 0, 2, options);
  ASSERT_EQ(world_.children()[0]->Wait(absl::Seconds(60)), 0);  // joined, then gone
  auto result = pg->Allreduce(at::full({1000}, 1.0f)).Wait(absl::Seconds(60));
  ASSERT_FALSE(result.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(result.status()) || absl::IsUnavailable(result.status()))
      << result.status();
  auto next = pg->Barrier().Wait(absl::Seconds(60));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kFailedPrecondition) << next.status();
}

TEST_F(NcclProcessGroupTest, MismatchedMessageIsAnErrorNamingBothSides) {
  SKIP_UNLESS_GPUS(2);
  world_.StartChildren(2, "nccl_sends_tag_8");
  auto pg = collectives::CreateNcclProcessGroup(world_.store(), 0, 2);
  auto result = pg->Recv(at::zeros({5}), 1, 7).Wait(absl::Seconds(60));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
  EXPECT_NE(result.status().message().find("rank 1 sent tag 8"), std::string::npos)
      << result.status();
}

}  // namespace
}  // namespace tessera::testing
