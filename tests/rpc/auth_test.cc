// Authentication, for every RPC backend: a worker answers only peers that
// prove they know the job secret (rpc/auth/handshake.h).
#include <gtest/gtest.h>

#include <ATen/ops/zeros.h>

#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

class AuthTest : public RpcWorld {
 protected:
  // worker0 calls worker1; the call must be refused, naming worker1 and
  // the secret, and fail fast rather than wait for its deadline.
  void ExpectRefused() {
    auto result = rt().RpcAsync<int64_t>(rpc::CallOptions{absl::Seconds(120)}, "worker1",
                                         "echo", int64_t{1})
                      .Wait(absl::Seconds(60));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kUnauthenticated) << result.status();
    EXPECT_NE(result.status().message().find("worker1"), std::string::npos) << result.status();
    EXPECT_NE(result.status().message().find("secret"), std::string::npos) << result.status();
  }
};

// Scenario: worker1 belongs to another job (another secret). Neither side
// can prove itself to the other; worker0's call fails with an
// authentication error, and both shut down cleanly.
TEST_F(AuthTest, WrongSecretIsRefused) {
  StartWorld(2, {{"TESSERA_JOB_SECRET", "the secret of another job"}});
  ExpectRefused();
}

// Scenario: worker1 was started without a secret. It cannot answer
// worker0's challenge, so worker0 refuses to send it anything.
TEST_F(AuthTest, WorkerWithoutSecretIsRefused) {
  StartWorld(2, {{"TESSERA_JOB_SECRET", ""}});
  ExpectRefused();
}

// The same secret (the fixture's default): calls go through both ways.
TEST_F(AuthTest, SameSecretIsAccepted) {
  StartWorld(3);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{5}), 5);
  EXPECT_EQ(ThreeHopNestedSum(), 6.0f);
}

}  // namespace
}  // namespace tessera::testing
