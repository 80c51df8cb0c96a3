// ProcessGroup conformance over Gloo with real processes: rank 0 is this
// process, the other ranks are children running the same sequence; each
// rank checks its own results. Then the failure modes: a rank that never
// joins, and a rank that dies.
#include "collectives/gloo/gloo_process_group.h"

#include <ATen/ops/full.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>

#include "absl/strings/match.h"
#include "tests/collectives/process_group_conformance.h"

namespace tessera::testing {
namespace {

// Gloo alone: ranks on one host would otherwise reduce through shared
// memory (tests/collectives/shm_process_group_test.cc).
collectives::GlooOptions GlooAlone() {
  collectives::GlooOptions options;
  options.shm.enabled = false;
  return options;
}

absl::StatusOr<collectives::EnvProcessGroup> ChildGroup() {
  collectives::GlooOptions options = GlooAlone();
  options.timeout = absl::Seconds(60);
  return collectives::CreateGlooProcessGroupFromEnv(options);
}

TESSERA_WORKER_SCENARIO(pg_conformance) { return RunChildRank(ChildGroup(), RunConformance); }

// Joins, then dies before the first collective.
TESSERA_WORKER_SCENARIO(pg_dies) { std::_Exit(ChildGroup().ok() ? 0 : 1); }

// The collective timeout of the late-joiner test.
constexpr absl::Duration kShortOpTimeout = absl::Seconds(1);

// Starts late, as a rank on a node that comes up after the others: the
// delay is the scenario (it only needs to exceed kShortOpTimeout; a slower
// machine makes it later still), then joins and runs one allreduce.
TESSERA_WORKER_SCENARIO(pg_late) {
  absl::SleepFor(3 * kShortOpTimeout);
  auto group = ChildGroup();
  if (!group.ok()) return 1;
  at::Tensor t = at::full({4}, 2.0f);
  return group->group->Allreduce(t).Wait(absl::Seconds(60)).ok() && t[0].item<float>() == 3.0f
             ? 0
             : 2;
}

class GlooProcessGroupTest : public ::testing::TestWithParam<int> {
 protected:
  ProcessGroupWorld world_;
};

TEST_P(GlooProcessGroupTest, EveryOpDtypeAndSize) {
  const int world_size = GetParam();
  world_.StartChildren(world_size, "pg_conformance");
  auto pg = collectives::CreateGlooProcessGroup(world_.store(), 0, world_size, GlooAlone());
  EXPECT_EQ(pg->size(), world_size);
  auto status = RunConformance(*pg);
  EXPECT_TRUE(status.ok()) << status;
  for (auto& child : world_.children()) EXPECT_EQ(child->Wait(absl::Seconds(120)), 0);
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooProcessGroupTest, ::testing::Values(2, 3));

TEST_F(GlooProcessGroupTest, MissingRankIsATimeoutNotAHang) {
  collectives::GlooOptions options = GlooAlone();
  options.connect_timeout = absl::Milliseconds(800);
  const absl::Status pg =
      StatusOf([&] { collectives::CreateGlooProcessGroup(world_.store(), 0, 2, options); });
  EXPECT_EQ(pg.code(), absl::StatusCode::kDeadlineExceeded) << pg;
  EXPECT_NE(pg.message().find("within 800 ms (GlooOptions::connect_timeout)"), std::string::npos)
      << pg;
}

// Joining is bounded by connect_timeout, not by the (shorter) collective
// timeout: a rank that starts seconds after the others still joins.
TEST_F(GlooProcessGroupTest, LateRankJoinsWithinConnectTimeout) {
  world_.StartChildren(2, "pg_late");
  collectives::GlooOptions options = GlooAlone();
  options.timeout = kShortOpTimeout;
  options.connect_timeout = absl::Seconds(120);
  auto pg = collectives::CreateGlooProcessGroup(world_.store(), 0, 2, options);
  at::Tensor t = at::full({4}, 1.0f);
  // The child allreduces right after joining: well within the short timeout.
  auto done = pg->Allreduce(t).Wait(absl::Seconds(60));
  EXPECT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(t[0].item<float>(), 3.0f);
  EXPECT_EQ(world_.children()[0]->Wait(absl::Seconds(60)), 0);
}

TEST_F(GlooProcessGroupTest, DeadRankFailsTheCollective) {
  world_.StartChildren(2, "pg_dies");
  collectives::GlooOptions options = GlooAlone();
  options.timeout = absl::Seconds(5);
  auto pg = collectives::CreateGlooProcessGroup(world_.store(), 0, 2, options);
  // Writes to the dead rank's socket fail with EPIPE instead of killing this
  // one (see Note [SIGPIPE]; before, about one run in thirty died here).
  struct sigaction broken_pipe {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &broken_pipe), 0);
  EXPECT_EQ(broken_pipe.sa_handler, SIG_IGN);
  ASSERT_EQ(world_.children()[0]->Wait(absl::Seconds(60)), 0);  // joined, then gone
  auto result = pg->Allreduce(at::full({1000}, 1.0f)).Wait(absl::Seconds(60));
  ASSERT_FALSE(result.ok());
  // At once, not at the timeout: the dead rank's connection broke.
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_TRUE(absl::StrContains(result.status().message(), "a peer's connection broke"))
      << result.status();
}

}  // namespace
}  // namespace tessera::testing
