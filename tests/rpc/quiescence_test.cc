// AgreeQuiescent over a real store: workers whose counters balance and hold
// still agree; one that never does makes every worker's agreement fail at
// its deadline, naming the rank and what it still holds (a shutdown that
// cannot agree must say who keeps it from agreeing, not only that it
// could not).
#include "rpc/quiescence.h"

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <vector>

#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::rpc {
namespace {

// Only counters(): AgreeQuiescent reads nothing else of an agent.
class CountersOnly final : public RpcAgent {
 public:
  explicit CountersOnly(AgentCounters counters) : counters_(counters) {}
  const WorkerInfo& self() const override { return self_; }
  void SetWorkers(std::vector<WorkerInfo>) override {}
  Future<Message> Send(int, Message, absl::Time) override {
    Promise<Message> never;
    return never.GetFuture();
  }
  AgentCounters counters() const override { return counters_; }
  void SetPeerFailureHandler(std::function<void(int)>) override {}
  void Close(const absl::Status&) override {}

 private:
  WorkerInfo self_;
  AgentCounters counters_;
};

// Each rank's AgreeQuiescent on its own thread, with its own client.
std::vector<absl::Status> Agree(const std::vector<AgentCounters>& counters, absl::Duration limit) {
  auto server = *store::StoreServer::Start("127.0.0.1", 0);
  const absl::Time deadline = absl::Now() + limit;
  std::vector<int> ranks;
  for (int r = 0; r < static_cast<int>(counters.size()); ++r) ranks.push_back(r);
  std::vector<std::future<absl::Status>> agreed;
  for (int r : ranks) {
    agreed.push_back(std::async(std::launch::async, [&, r] {
      store::StoreClient client("127.0.0.1", server->port(), absl::Seconds(10));
      CountersOnly agent(counters[r]);
      return AgreeQuiescent(
          client, "test/shutdown", r, [&] { return ranks; }, agent, deadline);
    }));
  }
  std::vector<absl::Status> statuses;
  for (auto& status : agreed) statuses.push_back(status.get());
  server->Shutdown();
  return statuses;
}

TEST(QuiescenceTest, BalancedCountersThatHoldStillAgree) {
  AgentCounters busy{7, 7, 3, 3};
  for (const absl::Status& status : Agree({busy, AgentCounters{3, 3, 7, 7}}, absl::Seconds(60))) {
    EXPECT_TRUE(status.ok()) << status;
  }
}

TEST(QuiescenceTest, ADeadlineNamesTheRankThatHoldsARequestAndOneThatWaitsForAnAnswer) {
  AgentCounters waiting{3, 2, 0, 0};     // one call unanswered
  AgentCounters in_service{0, 0, 5, 4};  // one request it never answered
  for (const absl::Status& status :
       Agree({AgentCounters{}, waiting, in_service}, absl::Seconds(2))) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_NE(status.message().find("rank 1: 1 of its 3 calls unanswered"), std::string::npos)
        << status;
    EXPECT_NE(status.message().find("rank 2: 1 of the 5 requests it received in service"),
              std::string::npos)
        << status;
    EXPECT_EQ(status.message().find("rank 0"), std::string::npos) << status;
  }
}

}  // namespace
}  // namespace tessera::rpc
