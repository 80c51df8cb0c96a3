// Fault tests with real processes: dead peers, timeouts and shutdown, for
// every RPC backend (hostile bytes on the wire: tensorpipe_wire_test,
// grpc_external_client_test).
#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <thread>

#include "rpc/init.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rpc::CallOptions;

class RpcFaultsTest : public RpcWorld {};

// Scenario: worker2 is killed while worker0 waits on a call to it. The
// pending call fails with Unavailable long before its 120 s deadline, and
// worker1 keeps serving.
TEST_F(RpcFaultsTest, WorkerKilledMidCallFailsPendingCallsOnly) {
  expect_clean_exit_ = false;
  // Deadlines far beyond the test's: the dead worker must be found by probing.
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "300"}}, absl::Seconds(300));
  auto pending = rt().RpcAsync<bool>(CallOptions{absl::Seconds(120)}, "worker2",
                                     "block", "killed-key");
  // The callee announces it is inside the call; then it dies.
  ASSERT_TRUE(rt().store().Get("killed-key/started", absl::Seconds(30)).ok());
  children_[1]->Kill();
  auto result = pending.Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("worker2"), std::string::npos);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  // New calls to the dead worker fail fast too, rather than hang.
  auto again = rt().RpcAsync<int64_t>(CallOptions{absl::Seconds(120)}, "worker2",
                                      "echo", int64_t{1})
                   .Wait(absl::Seconds(30));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();

  // Graceful shutdown cannot agree with a dead peer: it names the dead
  // worker (found by its liveness probe, long before the shutdown deadline)
  // and closes anyway instead of hanging.
  auto status = rt().TryShutdown();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find("worker 'worker2' (rank 2) is gone"), std::string::npos)
      << status;
  EXPECT_EQ(children_[0]->Wait(absl::Seconds(60)), 3);  // its shutdown also failed
}

TEST(RpcRendezvousTest, MissingWorkersAreNamedNotWaitedForever) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("worker0", 0, 3, (*store)->port());
  options.rendezvous_timeout = absl::Milliseconds(500);
  auto runtime = rpc::TryInit(options, MakeTestRegistry());
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(runtime.status().message().find("rank(s) 1, 2"), std::string::npos)
      << runtime.status();
}

// Scenario: calls are in flight when worker0 starts a graceful shutdown;
// they are released only once the shutdown protocol has begun. Every call
// still completes successfully, then everyone exits cleanly.
TEST_F(RpcFaultsTest, GracefulShutdownWaitsForCallsInFlight) {
  StartWorld(2);
  std::vector<Future<bool>> calls;
  for (int i = 0; i < 8; ++i) {
    calls.push_back(rt().RpcAsync<bool>("worker1", "block", "release"));
  }
  std::thread releaser([this] {
    // Rank 0's first shutdown snapshot proves the shutdown has begun.
    auto started = rt().store().Get("tessera/shutdown/0/0", absl::Seconds(30));
    EXPECT_TRUE(started.ok()) << started.status();
    EXPECT_TRUE(rt().store().Set("release", "go").ok());
  });
  auto status = rt().TryShutdown();
  releaser.join();
  EXPECT_TRUE(status.ok()) << status;
  for (auto& call : calls) {
    auto result = call.Wait(absl::Seconds(1));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(*result);
  }
}

// Scenario: a peer (it knows the secret) sends forged join announcements
// (Note [Elastic membership]): a rank the job never handed out, a huge one
// (which must not grow the member table), a value of the wrong type. Each
// is refused with an error naming it, and the worker keeps serving; a
// repeated announcement of a known rank changes nothing.
TEST_F(RpcFaultsTest, ForgedJoinAnnouncementsAreRefused) {
  StartWorld(2);
  auto join = [&](c10::IValue rank) {
    return rt().CallInternal(1, "tessera.join", {std::move(rank)}).Wait(absl::Seconds(30));
  };
  for (int64_t rank : {int64_t{2}, int64_t{1} << 40, int64_t{-1}}) {
    auto refused = join(c10::IValue(rank));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << rank;
    EXPECT_NE(refused.status().message().find("the job has handed out 2 ranks"), std::string::npos)
        << refused.status();
  }
  EXPECT_EQ(join(c10::IValue("worker0")).status().code(), absl::StatusCode::kInvalidArgument);
  auto again = join(c10::IValue(int64_t{0}));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->toBool());
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{5}), 5);
}

TEST_F(RpcFaultsTest, ForcedShutdownFailsPendingCalls) {
  expect_clean_exit_ = false;
  StartWorld(2, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}});
  auto pending = rt().RpcAsync<bool>("worker1", "block", "never");
  ASSERT_TRUE(rt().store().Get("never/started", absl::Seconds(30)).ok());
  EXPECT_TRUE(rt().TryShutdown(/*graceful=*/false).ok());
  auto result = pending.Wait(absl::Seconds(5));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  children_[0]->Kill();
}

}  // namespace
}  // namespace tessera::testing
