// Authentication, for every RPC backend: only processes that know the job
// secret take part in the job. A worker without it cannot even register at
// the rendezvous store (store/store_auth.h), so no member ever learns its
// address; the connection handshake (rpc/auth/handshake.h) refuses anyone
// who reaches a worker's port directly (tensorpipe_wire_test and
// grpc_external_client_test test it with raw peers on both backends), and a
// worker refuses a peer at a known address that cannot prove the secret
// (tensorpipe_wire_test, grpc_impostor_test).
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "rpc/init.h"
#include "store/store_client.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

class AuthTest : public RpcWorld {
 protected:
  // Scenario: worker1 is started with `child_secret`, not the job's. Its
  // start fails fast (exit code 1: init failed, at the store), nothing of
  // it reaches the store, and worker0's rendezvous fails naming rank 1
  // rather than letting it in.
  void ExpectCannotJoin(const std::string& child_secret) {
    auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
    ASSERT_TRUE(store.ok()) << store.status();
    auto env = WorkerEnv(1, 2, (*store)->port());
    env["TESSERA_JOB_SECRET"] = child_secret;
    WorkerProcess stranger("serve", env);
    EXPECT_EQ(stranger.Wait(absl::Seconds(60)), 1);

    rpc::RpcOptions options = InProcessOptions("worker0", 0, 2, (*store)->port());
    options.rendezvous_timeout = absl::Milliseconds(500);
    auto runtime = rpc::TryInit(options, MakeTestRegistry());
    ASSERT_FALSE(runtime.ok());
    EXPECT_EQ(runtime.status().code(), absl::StatusCode::kDeadlineExceeded) << runtime.status();
    EXPECT_NE(runtime.status().message().find("rank(s) 1 "), std::string::npos)
        << runtime.status();

    store::StoreClient member("127.0.0.1", (*store)->port(), absl::Seconds(10), TestJobSecret());
    auto missing = member.WaitForKeys({"tessera/workers/1"}, absl::ZeroDuration());
    ASSERT_TRUE(missing.ok()) << missing.status();
    EXPECT_EQ(missing->size(), 1u) << "the stranger registered itself";
  }
};

TEST_F(AuthTest, WorkerOfAnotherJobCannotJoin) { ExpectCannotJoin("the secret of another job"); }

TEST_F(AuthTest, WorkerWithoutSecretCannotJoin) { ExpectCannotJoin(""); }

// The same secret (the fixture's default): calls go through both ways.
TEST_F(AuthTest, SameSecretIsAccepted) {
  StartWorld(3);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{5}), 5);
  EXPECT_EQ(ThreeHopNestedSum(), 6.0f);
}

}  // namespace
}  // namespace tessera::testing
