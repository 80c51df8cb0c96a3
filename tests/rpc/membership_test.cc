// rpc::Membership's delivery of events to subscribers: in sequence order,
// one delivery at a time, and with no lock held while a listener runs — so
// a listener may change the membership (and deliver) itself.
#include "rpc/membership.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera::rpc {
namespace {

std::vector<WorkerInfo> Workers(int n) {
  std::vector<WorkerInfo> workers;
  for (int rank = 0; rank < n; ++rank) {
    workers.push_back({absl::StrCat("worker", rank), rank, "", "", "", 0});
  }
  return workers;
}

std::string Describe(const MembershipEvent& event) {
  return absl::StrCat(MembershipEventName(event.kind), " ", event.name);
}

TEST(MembershipTest, ListenersSeeEveryEventOnceInOrder) {
  Membership membership;
  membership.Reset(Workers(4));
  std::vector<std::string> seen;
  membership.Subscribe([&](const MembershipEvent& event) { seen.push_back(Describe(event)); });
  membership.MarkFailed(1);
  membership.MarkLeft(2);
  membership.DeliverPending();
  membership.DeliverPending();  // nothing new: no repeats
  ASSERT_EQ(seen, (std::vector<std::string>{
                      absl::StrCat(MembershipEventName(MembershipEventKind::kFailed), " worker1"),
                      absl::StrCat(MembershipEventName(MembershipEventKind::kLeft), " worker2")}));
}

// A listener that reacts to a failure by marking another rank failed and
// delivering: before deliveries ran without the lock, this deadlocked on it.
TEST(MembershipTest, AListenerMayChangeTheMembershipAndDeliver) {
  Membership membership;
  membership.Reset(Workers(3));
  std::vector<std::string> seen;
  membership.Subscribe([&](const MembershipEvent& event) {
    seen.push_back(Describe(event));
    if (event.rank == 1) {
      membership.MarkFailed(2);
      membership.DeliverPending();  // left to the delivery in progress
    }
  });
  membership.MarkFailed(1);
  membership.DeliverPending();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], absl::StrCat(MembershipEventName(MembershipEventKind::kFailed), " worker2"));
}

// Many threads delivering while events are recorded: each listener call is
// the next sequence number, none is skipped or repeated.
TEST(MembershipTest, ConcurrentDeliveriesKeepTheOrder) {
  constexpr int kRanks = 64;
  Membership membership;
  membership.Reset(Workers(kRanks));
  std::vector<uint64_t> sequences;
  membership.Subscribe([&](const MembershipEvent& event) { sequences.push_back(event.sequence); });
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rank = t; rank < kRanks; rank += 4) {
        membership.MarkFailed(rank);
        membership.DeliverPending();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  membership.DeliverPending();
  ASSERT_EQ(sequences.size(), static_cast<size_t>(kRanks));
  for (size_t i = 0; i < sequences.size(); ++i) EXPECT_EQ(sequences[i], sequences[0] + i);
}

}  // namespace
}  // namespace tessera::rpc
