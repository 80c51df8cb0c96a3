#include "tests/ddp/two_ranks.h"

#include <ATen/ops/ones.h>

#include <cstdio>

#include "common/status.h"

namespace tessera::testing {

void TwoRankGlooTest::SetUp() {
  server_ = *store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  store_ = std::make_unique<store::StoreClient>("127.0.0.1", server_->port(), absl::Seconds(60),
                                                TestJobSecret());
}

std::unique_ptr<collectives::ProcessGroup> TwoRankGlooTest::Start(const std::string& scenario) {
  child_ = std::make_unique<WorkerProcess>(scenario, WorkerEnv(1, 2, server_->port()));
  // A child that dies before joining fails the test in a minute, not after
  // the default connect timeout (5 minutes); starting takes ~1 s, more
  // under sanitizers.
  collectives::GlooOptions options;
  options.connect_timeout = absl::Seconds(60);
  return collectives::CreateGlooProcessGroup(store_.get(), 0, 2, options);
}

void TwoRankGlooTest::RunOnBothRanks(const std::string& scenario,
                                     absl::Status (*check)(collectives::ProcessGroup&)) {
  auto group = Start(scenario);
  ASSERT_NE(group, nullptr);
  const absl::Status status = check(*group);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(child_->Wait(absl::Seconds(120)), 0);
}

absl::Status GroupStillInStep(collectives::ProcessGroup& group, const std::string& after) {
  at::Tensor ones = at::ones({1});
  TESSERA_RETURN_IF_ERROR(group.Allreduce(ones).Wait(absl::Seconds(60)).status());
  return ones.item<float>() == group.size()
             ? absl::OkStatus()
             : absl::InternalError("the group is out of step after " + after);
}

int RunOnRank1(absl::Status (*check)(collectives::ProcessGroup&)) {
  auto env = collectives::CreateGlooProcessGroupFromEnv();
  auto status = check(*env.group);
  if (!status.ok()) std::fprintf(stderr, "rank 1: %s\n", status.ToString().c_str());
  return status.ok() ? 0 : 1;
}

}  // namespace tessera::testing
