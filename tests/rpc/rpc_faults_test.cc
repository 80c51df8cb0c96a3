// Fault tests with real processes: dead peers, timeouts and shutdown, for
// every RPC backend (hostile bytes on the wire: tensorpipe_wire_test,
// grpc_external_client_test).
#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "rpc/init.h"
#include "store/store_server.h"
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
  auto pending =
      rt().RpcAsync<bool>(CallOptions{absl::Seconds(120)}, "worker2", "block", "killed-key");
  // The callee announces it is inside the call; then it dies.
  ASSERT_TRUE(rt().store().Get("killed-key/started", absl::Seconds(30)).ok());
  children_[1]->Kill();
  auto result = pending.Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("worker2"), std::string::npos);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  // New calls to the dead worker fail fast too, rather than hang.
  auto again =
      rt().RpcAsync<int64_t>(CallOptions{absl::Seconds(120)}, "worker2", "echo", int64_t{1})
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

// Whether `runtime` has learned of an incarnation >= `incarnation` of `rank`
// within 30 s (from its membership events, not by sleeping).
bool Learns(rpc::Runtime& runtime, int rank, int incarnation) {
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  uint64_t seen = 0;
  while (absl::Now() < deadline) {
    auto info = runtime.membership().Find(rank);
    if (info.has_value() && info->incarnation >= incarnation) return true;
    for (const auto& event : runtime.membership().WaitForEvents(seen, absl::Seconds(1))) {
      seen = event.sequence;
    }
  }
  return false;
}

// See Note [Fencing stale incarnations]: rank 2's first process lives on, cut
// off but not dead, after its rank rejoined as a new incarnation (as after
// its launcher restarted it during a cut). Its calls are refused, naming it
// — on the connection it already had to worker0 and on a new one to
// worker1 — while the new incarnation's are served. On both backends.
class RpcFencingTest : public ::testing::TestWithParam<rpc::Backend> {
 protected:
  rpc::RpcOptions Options(const std::string& name, int rank, int port) const {
    rpc::RpcOptions options = InProcessOptions(name, rank, 3, port);
    options.backend = GetParam();
    return options;
  }
};

TEST_P(RpcFencingTest, AStaleIncarnationsCallsAreRefusedNamingIt) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  const int port = (*store)->port();
  std::vector<std::unique_ptr<rpc::Runtime>> world(3);
  std::vector<std::thread> starting;
  for (int rank = 0; rank < 3; ++rank) {
    starting.emplace_back([this, &world, rank, port] {
      auto runtime =
          rpc::TryInit(Options(absl::StrCat("worker", rank), rank, port), MakeTestRegistry());
      EXPECT_TRUE(runtime.ok()) << runtime.status();
      if (runtime.ok()) world[rank] = *std::move(runtime);
    });
  }
  for (auto& thread : starting) thread.join();
  for (const auto& runtime : world) ASSERT_NE(runtime, nullptr);
  rpc::Runtime& stale = *world[2];
  ASSERT_EQ(stale.RpcSync<int64_t>("worker0", "echo", int64_t{7}), 7);  // a connection to worker0

  rpc::RpcOptions rejoin = Options("worker2", 2, port);
  rejoin.join = rpc::JoinMode::kRejoin;
  auto fresh = rpc::TryInit(rejoin, MakeTestRegistry());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  for (int rank = 0; rank < 2; ++rank) ASSERT_TRUE(Learns(*world[rank], 2, 1)) << rank;

  for (const char* to : {"worker0", "worker1"}) {
    auto refused = stale.RpcAsync<int64_t>(CallOptions{absl::Seconds(30)}, to, "echo", int64_t{1})
                       .Wait(absl::Seconds(60));
    ASSERT_FALSE(refused.ok()) << to;
    EXPECT_TRUE(refused.status().code() == absl::StatusCode::kPermissionDenied ||
                refused.status().code() == absl::StatusCode::kUnauthenticated)
        << to << ": " << refused.status();
    EXPECT_NE(refused.status().message().find(
                  "'worker2' (rank 2) incarnation 0 was replaced by a newer incarnation"),
              std::string::npos)
        << to << ": " << refused.status();
  }
  EXPECT_EQ((*fresh)->RpcSync<int64_t>("worker0", "echo", int64_t{8}), 8);
  EXPECT_EQ(world[1]->RpcSync<int64_t>("worker2", "echo", int64_t{9}), 9);  // the new one

  stale.Shutdown(/*graceful=*/false);
  world[2].reset();
  std::vector<std::thread> stopping;
  for (rpc::Runtime* runtime : {world[0].get(), world[1].get(), fresh->get()}) {
    stopping.emplace_back([runtime] { EXPECT_TRUE(runtime->TryShutdown().ok()); });
  }
  for (auto& thread : stopping) thread.join();
}

// See Note [Simultaneous rejoins]: ranks 1 and 2 are lost together and
// both restarted at once (as every server of a parameter-server job). Each
// rejoining worker announces itself to the other while that one is still
// starting; the announcements are answered at once, so both starts end well
// inside the rendezvous budget and neither marks the other failed — where
// before each waited out the whole budget (120 s here) for the other and
// then called it failed.
TEST_P(RpcFencingTest, TwoRanksRejoiningAtOnceMeetWithoutWaitingOutTheirBudgets) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  const int port = (*store)->port();
  const absl::Duration budget = absl::Seconds(120);
  auto start_all = [&](const std::vector<int>& ranks, rpc::JoinMode join) {
    std::vector<std::unique_ptr<rpc::Runtime>> started(3);
    std::vector<std::thread> starting;
    for (int rank : ranks) {
      starting.emplace_back([&, rank] {
        rpc::RpcOptions options = Options(absl::StrCat("worker", rank), rank, port);
        options.rendezvous_timeout = budget;
        options.join = join;
        auto runtime = rpc::TryInit(options, MakeTestRegistry());
        EXPECT_TRUE(runtime.ok()) << runtime.status();
        if (runtime.ok()) started[rank] = *std::move(runtime);
      });
    }
    for (auto& thread : starting) thread.join();
    return started;
  };
  std::vector<std::unique_ptr<rpc::Runtime>> world = start_all({0, 1, 2}, rpc::JoinMode::kStart);
  for (const auto& runtime : world) ASSERT_NE(runtime, nullptr);
  for (int rank : {1, 2}) {
    world[rank]->Shutdown(/*graceful=*/false);
    world[rank].reset();
  }

  std::vector<std::unique_ptr<rpc::Runtime>> fresh = start_all({1, 2}, rpc::JoinMode::kRejoin);
  ASSERT_NE(fresh[1], nullptr);
  ASSERT_NE(fresh[2], nullptr);
  for (int rank : {1, 2}) {
    const int other = 3 - rank;
    for (const rpc::Member& member : fresh[rank]->membership().Members()) {
      if (member.info.rank != other) continue;
      EXPECT_EQ(member.state, rpc::MemberState::kLive) << "rank " << rank << " on " << other;
      EXPECT_EQ(member.info.incarnation, 1) << "rank " << rank << " on " << other;
    }
    EXPECT_EQ(fresh[rank]->RpcSync<int64_t>(absl::StrCat("worker", other), "echo", int64_t{rank}),
              rank);
  }
  ASSERT_TRUE(Learns(*world[0], 1, 1));
  ASSERT_TRUE(Learns(*world[0], 2, 1));

  std::vector<std::thread> stopping;
  for (rpc::Runtime* runtime : {world[0].get(), fresh[1].get(), fresh[2].get()}) {
    stopping.emplace_back([runtime] { EXPECT_TRUE(runtime->TryShutdown().ok()); });
  }
  for (auto& thread : stopping) thread.join();
}

INSTANTIATE_TEST_SUITE_P(Backends, RpcFencingTest,
                         ::testing::Values(rpc::Backend::kTensorPipe, rpc::Backend::kGrpc),
                         [](const ::testing::TestParamInfo<rpc::Backend>& info) {
                           return std::string(rpc::BackendName(info.param));
                         });

TEST(RpcRendezvousTest, MissingWorkersAreNamedNotWaitedForever) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("worker0", 0, 3, (*store)->port());
  options.rendezvous_timeout = absl::Milliseconds(500);
  auto runtime = rpc::TryInit(options, MakeTestRegistry());
  ASSERT_FALSE(runtime.ok());
  EXPECT_EQ(runtime.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(runtime.status().message().find("rank(s) 1, 2"), std::string::npos) << runtime.status();
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
// (see Note [Elastic membership]): a rank the job never handed out, a huge one
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
