// See Note [Bounded queues] (rpc/queue_limits.h), on every backend with real
// worker processes: a callee holding its bound of calls answers one more
// with RESOURCE_EXHAUSTED at once and serves on; a caller whose requests to
// a peer pile up unsent (the peer is stopped) fails the next ones at once
// instead of queueing them, and the ones it took still arrive.
#include <ATen/ops/full.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {
namespace {

using rpc::CallOptions;

constexpr int kRequestsInService = 4;
constexpr uint64_t kUnsentBytes = 8 << 20;

class BoundedQueuesTest : public RpcWorld {
  void Configure(rpc::RpcOptions& options) override {
    options.queues.max_unsent_bytes_per_peer = kUnsentBytes;
  }
};

TEST_F(BoundedQueuesTest, ACalleeAtItsBoundRefusesMoreAtOnceAndServesOn) {
  StartWorld(2, {{"TESSERA_MAX_REQUESTS_IN_SERVICE", std::to_string(kRequestsInService)}});
  const CallOptions patient{absl::Seconds(120)};
  std::vector<Future<bool>> held;
  for (int i = 0; i < kRequestsInService; ++i) {
    held.push_back(rt().RpcAsync<bool>(patient, "worker1", "block", absl::StrCat("held/", i)));
  }
  for (int i = 0; i < kRequestsInService; ++i) {
    ASSERT_TRUE(rt().store().Get(absl::StrCat("held/", i, "/started"), absl::Seconds(60)).ok());
  }
  // Refused by worker1 without running: not a deadline (120 s), an answer.
  auto refused = rt().RpcAsync<int64_t>(patient, "worker1", "echo", int64_t{7})
                     .Wait(absl::Seconds(60));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("worker1"), std::string::npos) << refused.status();
  EXPECT_NE(refused.status().message().find("max_requests_in_service"), std::string::npos)
      << refused.status();
  for (int i = 0; i < kRequestsInService; ++i) {
    ASSERT_TRUE(rt().store().Set(absl::StrCat("held/", i), "go").ok());
  }
  for (auto& call : held) {
    auto result = call.Wait(absl::Seconds(60));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(*result);
  }
  // The calls it held are answered; it takes new ones again.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{8}), 8);
}

TEST_F(BoundedQueuesTest, CallsToAStoppedPeerFailAtTheBoundAndTheOnesTakenArrive) {
  StartWorld(2);
  const at::Tensor one_mib = at::full({1 << 18}, 1.0f);  // 1 MiB of float
  // Connected (handshake done) before the peer stops.
  ASSERT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  const pid_t peer = children_[0]->pid();
  ASSERT_EQ(kill(peer, SIGSTOP), 0);
  // 256 MiB of calls: far more than sockets, windows and the 8 MiB bound hold.
  const CallOptions patient{absl::Seconds(120)};
  std::vector<Future<at::Tensor>> calls;
  for (int i = 0; i < 256; ++i) {
    calls.push_back(rt().RpcAsync<at::Tensor>(patient, "worker1", "echo", one_mib));
  }
  // The last call is refused while the peer is still stopped: at once, by
  // this worker, not by a deadline.
  auto last = calls.back().Wait(absl::Seconds(60));
  ASSERT_EQ(kill(peer, SIGCONT), 0);
  ASSERT_FALSE(last.ok());
  EXPECT_EQ(last.status().code(), absl::StatusCode::kResourceExhausted) << last.status();
  EXPECT_NE(last.status().message().find("max_unsent_bytes_per_peer"), std::string::npos)
      << last.status();
  EXPECT_NE(last.status().message().find("worker1"), std::string::npos) << last.status();
  int answered = 0;
  for (auto& call : calls) {
    auto result = call.Wait(absl::Seconds(120));
    if (result.ok()) {
      ++answered;
      EXPECT_EQ(result->sum().item<float>(), static_cast<float>(1 << 18));
    } else {
      EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted) << result.status();
    }
  }
  // The first calls were taken (nothing was waiting), and arrived.
  EXPECT_GT(answered, 0);
  EXPECT_LT(answered, 256);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{2}), 2);
}

}  // namespace
}  // namespace tessera::testing
