// DistributedDataParallel replicas: creation refuses ranks whose models
// differ in a way the element counts alone would not show (a transposed
// weight, another dtype), naming the parameter on every rank; and a model
// mixing float and double parameters averages each in its own precision.
// Rank 0 is this process, rank 1 a child.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>

#include "absl/strings/str_cat.h"
#include "collectives/gloo/gloo_process_group.h"
#include "ddp/distributed_data_parallel.h"
#include "tests/ddp/two_ranks.h"

namespace tessera::testing {
namespace {

// One parameter, `w`, of the given shape and dtype.
struct ShapedImpl : torch::nn::Module {
  ShapedImpl(at::IntArrayRef sizes, at::ScalarType dtype) {
    register_parameter("w", torch::zeros(sizes, torch::dtype(dtype)));
  }
};

// The error creation must give on `rank`, holding `w` of `described`.
absl::Status RefusedNaming(const absl::Status& created, int rank, const std::string& described) {
  const std::string expected = absl::StrCat("parameter 'w' is ", described, " on rank ", rank);
  if (created.ok()) return absl::InternalError("created DDP over replicas that differ");
  if (created.code() != absl::StatusCode::kInvalidArgument ||
      created.message().find(expected) == std::string::npos) {
    return absl::InternalError(
        absl::StrCat("expected an error with \"", expected, "\", got: ", created.ToString()));
  }
  return absl::OkStatus();
}

// Rank 1 holds `w` of `sizes` and `dtype`; rank 0 holds Float [2, 5].
absl::Status RefuseOn(collectives::ProcessGroup& group, at::IntArrayRef sizes, at::ScalarType dtype,
                      const std::string& described) {
  const absl::Status refused = StatusOf([&] {
    ddp::DistributedDataParallel::Create(std::make_shared<ShapedImpl>(sizes, dtype), &group);
  });
  return RefusedNaming(refused, group.rank(), described);
}

TESSERA_WORKER_SCENARIO(ddp_transposed) {
  return RunOnRank1([](collectives::ProcessGroup& group) {
    return RefuseOn(group, {5, 2}, at::kFloat, "Float [5, 2]");
  });
}
TESSERA_WORKER_SCENARIO(ddp_other_dtype) {
  return RunOnRank1([](collectives::ProcessGroup& group) {
    return RefuseOn(group, {2, 5}, at::kDouble, "Double [2, 5]");
  });
}

// Two branches with losses of their own, so the `exact` branch is double from
// input to gradient. Registered first, it comes last in backward order: a
// bucket shared with `rough` (float, met first) would round its gradients.
struct TwoPrecisionsImpl : torch::nn::Module {
  explicit TwoPrecisionsImpl(int64_t seed) {
    torch::manual_seed(seed);
    exact = register_module("exact", torch::nn::Linear(10, 5));
    exact->to(torch::kDouble);
    rough = register_module("rough", torch::nn::Linear(10, 5));
  }
  torch::Tensor Loss(const torch::Tensor& x, const torch::Tensor& y) {
    return torch::mse_loss(exact->forward(x.to(torch::kDouble)), y.to(torch::kDouble)) +
           torch::mse_loss(rough->forward(x), y).to(torch::kDouble);
  }
  torch::nn::Linear exact{nullptr};
  torch::nn::Linear rough{nullptr};
};

// One backward on this rank's half of a batch; the averaged gradients must
// match one process's on the whole batch: the double ones to double
// precision (float rounding would leave ~1e-8), the float ones to float's.
absl::Status RunTwoPrecisions(collectives::ProcessGroup& group) {
  const int r = group.rank();
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({8, 10});
  const torch::Tensor y = torch::randn({8, 5});
  auto replica = std::make_shared<TwoPrecisionsImpl>(/*seed=*/50 + r);  // ranks start apart
  auto reference = std::make_shared<TwoPrecisionsImpl>(/*seed=*/50);
  auto ddp = ddp::DistributedDataParallel::Create(replica, &group);
  if (ddp->num_buckets() != 2) {
    return absl::InternalError(absl::StrCat(ddp->num_buckets(), " buckets, expected 2"));
  }
  replica->Loss(x.narrow(0, 4 * r, 4), y.narrow(0, 4 * r, 4)).backward();
  reference->Loss(x, y).backward();
  const auto mine = replica->named_parameters();
  const auto whole = reference->named_parameters();
  for (const auto& item : mine) {
    const torch::Tensor& expected = whole[item.key()].grad();
    const torch::Tensor& got = item.value().grad();
    const bool is_double = got.scalar_type() == torch::kDouble;
    if (got.scalar_type() != expected.scalar_type() ||
        !torch::allclose(got, expected, /*rtol=*/0, /*atol=*/is_double ? 1e-13 : 1e-6)) {
      return absl::InternalError(
          absl::StrCat("gradient of '", item.key(), "' differs from one process's by ",
                       (got - expected).abs().max().item<double>()));
    }
  }
  return absl::OkStatus();
}

class DdpReplicaTest : public TwoRankGlooTest {
 protected:
  // Rank 1 runs `scenario` (a replica unlike rank 0's Float [2, 5]); both
  // ranks' creations must fail naming `w` as each holds it.
  void ExpectRefusedOnBothRanks(const std::string& scenario) {
    RunOnBothRanks(scenario, [](collectives::ProcessGroup& group) {
      return RefuseOn(group, {2, 5}, at::kFloat, "Float [2, 5]");
    });
  }
};

TEST_F(DdpReplicaTest, TransposedWeightIsRefusedOnEveryRank) {
  ExpectRefusedOnBothRanks("ddp_transposed");
}

TEST_F(DdpReplicaTest, OtherDtypeIsRefusedOnEveryRank) { ExpectRefusedOnBothRanks("ddp_other_dtype"); }

TESSERA_TWO_RANK_TEST(DdpReplicaTest, FloatAndDoubleParametersAverageEachInItsOwnPrecision,
                      RunTwoPrecisions)

// Rank 1 joins, creates its replica (the parameters' broadcast needs it), and
// is SIGKILLed before the first backward.
TESSERA_WORKER_SCENARIO(ddp_killed_before_backward) {
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  ddp::DistributedDataParallel::Create(std::make_shared<ShapedImpl>(at::IntArrayRef{2, 5},
                                                                    at::kFloat),
                                       env.group.get());
  ::raise(SIGKILL);
  return 1;
}

// The error rule (README "Errors"): a bucket's failed allreduce reaches the
// caller of backward() as a StatusError with the collective's own code
// (UNAVAILABLE: a peer is gone), not a flattened string.
TEST_F(DdpReplicaTest, AFailedBucketAllreduceKeepsItsStatusCode) {
  auto group = Start("ddp_killed_before_backward");
  ASSERT_NE(group, nullptr);
  auto replica = std::make_shared<ShapedImpl>(at::IntArrayRef{2, 5}, at::kFloat);
  ddp::DdpOptions options;
  options.timeout = absl::Seconds(60);
  auto ddp = ddp::DistributedDataParallel::Create(replica, group.get(), options);
  ASSERT_EQ(child_->Wait(absl::Seconds(60)), 128 + SIGKILL);
  const absl::Status failed =
      StatusOf([&] { (replica->parameters()[0] * 2).sum().backward(); });
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("averaging gradient bucket 0"));
}

}  // namespace
}  // namespace tessera::testing
