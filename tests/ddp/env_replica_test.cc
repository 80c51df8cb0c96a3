// ddp::ConnectReplicaFromEnv (ddp/fault_tolerant/env_replica.h) refuses an
// environment whose store would die with a replica, saying how to run it.
// That it connects, declares the role and names the replica under
// tessera-run is fault_tolerant_ddp_test's: the example starts from it.
#include "ddp/fault_tolerant/env_replica.h"

#include <cstdlib>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tessera::ddp {
namespace {

TEST(EnvReplicaTest, AStoreThatDiesWithAReplicaIsRefused) {
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "3", 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "1", 1);
  ::unsetenv("TESSERA_STORE_HOSTED");
  ::unsetenv("TESSERA_STORE");
  const auto replica = ConnectReplicaFromEnv();
  ASSERT_FALSE(replica.ok());
  EXPECT_EQ(replica.status().code(), absl::StatusCode::kFailedPrecondition) << replica.status();
  EXPECT_TRUE(absl::StrContains(replica.status().message(), "tessera-run")) << replica.status();
}

TEST(EnvReplicaTest, AMissingRankIsNamed) {
  ::unsetenv("RANK");
  ::setenv("WORLD_SIZE", "3", 1);
  ::setenv("TESSERA_STORE_HOSTED", "1", 1);
  const auto replica = ConnectReplicaFromEnv();
  ASSERT_FALSE(replica.ok());
  EXPECT_TRUE(absl::StrContains(replica.status().message(), "RANK")) << replica.status();
}

}  // namespace
}  // namespace tessera::ddp
