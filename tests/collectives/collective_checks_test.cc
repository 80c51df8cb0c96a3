// Checked collectives (collectives/collective_checks.h) over Gloo with real
// processes: valid calls still give the right results; calls that differ
// across ranks fail on every rank at once, saying who issued what, and the
// group goes on working.
#include "collectives/collective_checks.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/collective_fingerprint.h"
#include "collectives/gloo/gloo_process_group.h"
#include "common/status.h"
#include "tests/collectives/process_group_conformance.h"

namespace tessera::testing {
namespace {

using collectives::CollectiveKind;
using collectives::ReduceOp;

const std::map<std::string, std::string> kChecked = {{"TESSERA_DISTRIBUTED_DEBUG", "DETAIL"}};

// `work` must fail with INVALID_ARGUMENT saying each of `parts`.
absl::Status ExpectMismatch(collectives::Work work, const std::vector<std::string>& parts) {
  auto result = work.Wait(absl::Seconds(60));
  if (result.status().code() != absl::StatusCode::kInvalidArgument) {
    return absl::InternalError(absl::StrCat("expected a mismatch, got ", result.status().ToString()));
  }
  for (const auto& part : parts) {
    if (!absl::StrContains(result.status().message(), part)) {
      return absl::InternalError(
          absl::StrCat("'", result.status().message(), "' does not say '", part, "'"));
    }
  }
  return absl::OkStatus();
}

// Each kind of mismatch once (world size 3), then a valid call.
absl::Status RunMismatches(collectives::ProcessGroup& pg) {
  const int r = pg.rank();
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(pg.Allreduce(at::ones({r == 1 ? 5 : 4})),
                                         {"collective #1 differs across ranks (not run)",
                                          "ranks 0, 2 issued allreduce(sum) of Float[4]",
                                          "rank 1 issued allreduce(sum) of Float[5]"}));
  // The same number of elements in another shape.
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(
      pg.Allreduce(r == 2 ? at::ones({3, 2}) : at::ones({2, 3})),
      {"ranks 0, 1 issued allreduce(sum) of Float[2, 3]", "rank 2 issued allreduce(sum) of Float[3, 2]"}));
  TESSERA_RETURN_IF_ERROR(
      ExpectMismatch(pg.Allreduce(at::ones({4}, r == 0 ? at::kDouble : at::kFloat)),
                     {"rank 0 issued allreduce(sum) of Double[4]"}));
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(
      pg.Allreduce(at::ones({4}), r == 1 ? ReduceOp::kMax : ReduceOp::kSum),
      {"rank 1 issued allreduce(max) of Float[4]", "ranks 0, 2 issued allreduce(sum)"}));
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(
      r == 0 ? pg.Broadcast(at::ones({4}), 0) : pg.Allreduce(at::ones({4})),
      {"rank 0 issued broadcast from rank 0 of Float[4]", "ranks 1, 2 issued allreduce(sum)"}));
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(pg.Broadcast(at::ones({4}), r == 2 ? 2 : 0),
                                         {"rank 2 issued broadcast from rank 2"}));
  // A root that is no rank at all: compared like any other, so every rank
  // fails at once (not only rank 2, the others then waiting out the timeout).
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(pg.Broadcast(at::ones({4}), r == 2 ? 7 : 0),
                                         {"rank 2 issued broadcast from rank 7"}));
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(pg.Allgather(at::ones({2}), at::zeros({r == 1 ? 4 : 6})),
                                         {"rank 1 issued allgather of Float[2] into Float[4]"}));
  TESSERA_RETURN_IF_ERROR(ExpectMismatch(r == 2 ? pg.Barrier() : pg.Allreduce(at::ones({1})),
                                         {"collective #9", "rank 2 issued barrier"}));
  // None of those ran, so the group is still in step.
  at::Tensor sum = at::full({4}, r + 1.0f);
  TESSERA_RETURN_IF_ERROR(Done(pg.Allreduce(sum)));
  if (!at::equal(sum, at::full({4}, 6.0f))) return absl::InternalError("wrong sum after mismatches");
  return absl::OkStatus();
}

absl::StatusOr<collectives::EnvProcessGroup> ChildGroup() {
  collectives::GlooOptions options;
  options.timeout = absl::Seconds(60);
  return collectives::CreateGlooProcessGroupFromEnv(options);
}

// The children's groups are checked through TESSERA_DISTRIBUTED_DEBUG.
TESSERA_WORKER_SCENARIO(checked_conformance) { return RunChildRank(ChildGroup(), RunConformance); }
TESSERA_WORKER_SCENARIO(checked_mismatches) { return RunChildRank(ChildGroup(), RunMismatches); }

// Unchecked: joins, then issues no collective until rank 0 has given up.
TESSERA_WORKER_SCENARIO(silent_rank) {
  auto env = ChildGroup();
  if (!env.ok()) return 1;
  return env->store->Get("test/rank0_gave_up", absl::Seconds(60)).ok() ? 0 : 1;
}

class CollectiveChecksTest : public ::testing::Test {
 protected:
  // Rank 0 of a checked Gloo group of `world_size`, the others running
  // `scenario` with checks on.
  std::unique_ptr<collectives::ProcessGroup> StartChecked(int world_size,
                                                          const std::string& scenario) {
    world_.StartChildren(world_size, scenario, kChecked);
    collectives::GlooOptions options;
    options.timeout = absl::Seconds(60);
    return collectives::WithCollectiveChecks(
        collectives::CreateGlooProcessGroup(world_.store(), 0, world_size, options),
        options.timeout);
  }

  // Rank 0 runs `body`; ranks 1 and 2 run `scenario` (the same body).
  void RunOnThreeRanks(const std::string& scenario,
                       const std::function<absl::Status(collectives::ProcessGroup&)>& body) {
    auto pg = StartChecked(3, scenario);
    ASSERT_NE(pg, nullptr);
    auto status = body(*pg);
    EXPECT_TRUE(status.ok()) << status;
    for (auto& child : world_.children()) EXPECT_EQ(child->Wait(absl::Seconds(120)), 0);
  }

  ProcessGroupWorld world_;
};

TEST_F(CollectiveChecksTest, ValidCallsGiveTheSameResults) {
  RunOnThreeRanks("checked_conformance", RunConformance);
}

TEST_F(CollectiveChecksTest, MismatchesFailEveryRankAndTheGroupGoesOn) {
  RunOnThreeRanks("checked_mismatches", RunMismatches);
}

// (Unchecked, a Gloo rank that is sent more bytes than it expects aborts:
// Gloo enforces the size on its network thread. So the unchecked case shown
// here is the other one, a rank that does not join the collective.)
TEST_F(CollectiveChecksTest, UncheckedATimeoutPointsToTheChecks) {
  world_.StartChildren(2, "silent_rank");
  collectives::GlooOptions options;
  options.timeout = absl::Seconds(1);  // joining is bounded by connect_timeout instead
  auto pg = collectives::CreateGlooProcessGroup(world_.store(), 0, 2, options);
  auto result = pg->Allreduce(at::ones({4})).Wait(absl::Seconds(60));
  ASSERT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "TESSERA_DISTRIBUTED_DEBUG=DETAIL"))
      << result.status();
  ASSERT_TRUE(world_.store()->Set("test/rank0_gave_up", "1").ok());
  EXPECT_EQ(world_.children()[0]->Wait(absl::Seconds(60)), 0);
}

TEST(CollectiveChecksFromEnvTest, AnUnknownLevelIsAnErrorNamingTheAcceptedOnes) {
  setenv("TESSERA_DISTRIBUTED_DEBUG", "INFO", 1);
  auto checked = collectives::CollectiveChecksFromEnv();
  unsetenv("TESSERA_DISTRIBUTED_DEBUG");
  ASSERT_FALSE(checked.ok());
  EXPECT_TRUE(absl::StrContains(checked.status().message(), "'INFO' is not one of OFF, DETAIL"))
      << checked.status();
  ASSERT_TRUE(collectives::CollectiveChecksFromEnv().ok());
  EXPECT_FALSE(*collectives::CollectiveChecksFromEnv());
}

std::string Describe(const at::Tensor& fingerprint) {
  return collectives::DescribeFingerprint(fingerprint.data_ptr<int64_t>());
}

TEST(CollectiveFingerprintTest, DescribesLayoutAndManyDimensions) {
  at::Tensor transposed = at::ones({2, 3}).t();
  EXPECT_EQ(Describe(collectives::Fingerprint(
                CollectiveKind::kAllreduce, static_cast<int64_t>(ReduceOp::kAverage), transposed)),
            "allreduce(average) of Float[3, 2] (non-contiguous)");
  at::Tensor many = at::zeros({1, 2, 1, 2, 1, 2, 3, 5}, at::kLong);
  EXPECT_EQ(Describe(collectives::Fingerprint(CollectiveKind::kBroadcast, 1, many)),
            "broadcast from rank 1 of Long[1, 2, 1, 2, 1, 2, 15...]");
  EXPECT_EQ(
      Describe(collectives::Fingerprint(CollectiveKind::kReduceScatter,
                                        static_cast<int64_t>(ReduceOp::kMin), at::ones({6}), {})),
      "reduce_scatter(min) of Float[6] into an undefined tensor");
}

TEST(CollectiveFingerprintTest, EqualCallsCompareEqualAndTheLastDimensionCounts) {
  auto gathered = [](const at::Tensor& a, const at::Tensor& b) {
    return at::cat({collectives::Fingerprint(CollectiveKind::kAllreduce, 0, a),
                    collectives::Fingerprint(CollectiveKind::kAllreduce, 0, b)});
  };
  EXPECT_TRUE(
      collectives::CompareFingerprints(gathered(at::ones({2, 2}), at::ones({2, 2})), 1).ok());
  // Dimensions past the seventh are folded into it, not dropped.
  auto folded = collectives::CompareFingerprints(
      gathered(at::ones({1, 1, 1, 1, 1, 1, 2, 3}), at::ones({1, 1, 1, 1, 1, 1, 2, 4})), 9);
  EXPECT_EQ(folded.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(folded.message(), "collective #9")) << folded;
}

}  // namespace
}  // namespace tessera::testing
