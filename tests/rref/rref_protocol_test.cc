// RRef protocol in exact message orders, over a fake network (three
// runtimes in this process; the test delivers each message). Each test
// opens with its scenario and ends with a graceful shutdown of all three,
// which fails if any value is still referenced (zero leaks), plus explicit
// checks that every owner's table is empty.
#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <future>

#include "rpc/init.h"
#include "store/store_server.h"
#include "tests/rref/rref_world.h"
#include "tests/testing/fake_network.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rref::Remote;
using rref::RRef;
using Envelope = FakeNetwork::Envelope;

constexpr int kWorld = 3;  // worker0 creates, worker1 owns, worker2 borrows

class RRefProtocolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = *store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
    network_ = FakeNetwork::Create();
    std::vector<std::future<absl::StatusOr<std::unique_ptr<rpc::Runtime>>>> starting;
    for (int rank = 0; rank < kWorld; ++rank) {
      contexts_.push_back(rref::RRefContext::Create(MakeTestClasses()));
      rpc::RpcOptions options =
          InProcessOptions("worker" + std::to_string(rank), rank, kWorld, store_->port());
      options.agent_factory = network_->Factory();
      auto context = contexts_.back();
      starting.push_back(std::async(std::launch::async, [options, context] {
        return rpc::TryInit(options, MakeRRefTestRegistry(context), {context});
      }));
    }
    for (auto& f : starting) {
      auto runtime = f.get();
      ASSERT_TRUE(runtime.ok()) << runtime.status();
      runtimes_.push_back(*std::move(runtime));
    }
  }

  void TearDown() override {
    network_->SetAutoDeliver(true);
    std::vector<std::future<absl::Status>> stopping;
    for (auto& runtime : runtimes_) {
      stopping.push_back(
          std::async(std::launch::async, [&runtime] { return runtime->TryShutdown(); }));
    }
    for (auto& f : stopping) EXPECT_TRUE(f.get().ok());
    network_->SetAutoDeliver(false);
    runtimes_.clear();
  }

  rref::RRefContext& rrefs(int rank) { return *contexts_[rank]; }
  rpc::Runtime& rt(int rank) { return *runtimes_[rank]; }
  rref::RRefContext::Stats stats(int rank) { return contexts_[rank]->stats(); }
  static std::function<bool(const Envelope&)> Request(const std::string& target) {
    return [target](const Envelope& e) { return !e.is_response && e.target == target; };
  }
  bool Settle(const std::function<bool()>& done) {
    return network_->RunUntil(done, absl::Seconds(30));
  }

  std::unique_ptr<store::StoreServer> store_;
  std::shared_ptr<FakeNetwork> network_;
  std::vector<std::shared_ptr<rref::RRefContext>> contexts_;
  std::vector<std::unique_ptr<rpc::Runtime>> runtimes_;
};

// Scenario (see Note [Early arrivals]): worker0 creates a value on worker1 and
// at once passes the RRef to worker2. worker2's fork request reaches worker1
// BEFORE the creation does. worker1 holds it until the creation arrives,
// then registers both forks; worker0's parent reference is released only
// after worker2's fork is confirmed (G2).
TEST_F(RRefProtocolTest, ForkRequestBeforeCreation) {
  RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{3});
  auto kept = rt(0).RpcAsync<int64_t>("worker2", "keep", t);
  ASSERT_EQ(network_->Pending().size(), 2u);  // rref.remote, keep

  ASSERT_TRUE(network_->DeliverFirst(Request("keep")));  // worker2 asks worker1 for a fork
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.fork")));
  EXPECT_EQ(stats(1).owned_values, 0u);  // not created yet: the fork waits
  EXPECT_EQ(stats(0).pending_children, 1u);

  ASSERT_TRUE(network_->DeliverFirst(Request("rref.remote")));
  EXPECT_EQ(stats(1).owned_values, 1u);
  EXPECT_EQ(stats(1).known_forks, 2u);  // worker0's and worker2's

  ASSERT_TRUE(Settle([&] {
    return stats(0).pending_children == 0 && kept.IsReady() && t.confirmed_by_owner();
  }));
  EXPECT_EQ(*kept.Wait(absl::ZeroDuration()), 1);

  auto fetched = t.to_here_async();
  ASSERT_TRUE(Settle([&] { return fetched.IsReady(); }));
  EXPECT_TRUE(at::equal(*fetched.Wait(absl::ZeroDuration()), at::ones({3}) * 3));

  t = RRef<at::Tensor>();
  auto dropped = rt(0).RpcAsync<void>("worker2", "drop_kept");
  ASSERT_TRUE(Settle([&] { return stats(1).owned_values == 0 && dropped.IsReady(); }));
}

// Scenario (G1): worker0 drops its RRef before worker1 has even seen the
// creation. No delete may overtake the creation: it is sent only once the
// creation is acknowledged, and then the value is freed.
TEST_F(RRefProtocolTest, DeleteWaitsForConfirmation) {
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{1});
  }
  auto pending = network_->Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].target, "rref.remote");  // and no rref.delete yet
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.remote")));
  EXPECT_EQ(stats(1).owned_values, 1u);
  ASSERT_TRUE(Settle([&] { return stats(1).owned_values == 0 && stats(0).user_forks == 0; }));
}

// Scenario (G2): worker0 passes a confirmed RRef to worker2 and drops its
// own handle immediately. Its reference stays alive (a pending child) until
// worker2's fork is confirmed, so worker1 never sees zero references while
// worker2 holds one.
TEST_F(RRefProtocolTest, ParentKeepsItsReferenceUntilTheChildIsConfirmed) {
  RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{2});
  ASSERT_TRUE(Settle([&] { return t.confirmed_by_owner(); }));
  auto kept = rt(0).RpcAsync<int64_t>("worker2", "keep", t);
  t = RRef<at::Tensor>();
  EXPECT_EQ(stats(0).pending_children, 1u);
  EXPECT_EQ(stats(0).user_forks, 1u);  // kept alive by the pending child

  ASSERT_TRUE(network_->DeliverFirst(Request("keep")));
  // worker0's delete cannot be on the wire before worker2's fork is known.
  for (const auto& e : network_->Pending()) EXPECT_NE(e.target, "rref.delete");
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.fork")));
  EXPECT_EQ(stats(1).known_forks, 2u);

  ASSERT_TRUE(Settle([&] { return stats(0).user_forks == 0 && kept.IsReady(); }));
  EXPECT_EQ(stats(1).owned_values, 1u);  // worker2 still holds it
  EXPECT_EQ(stats(1).known_forks, 1u);

  auto dropped = rt(0).RpcAsync<void>("worker2", "drop_kept");
  ASSERT_TRUE(Settle([&] { return stats(1).owned_values == 0 && dropped.IsReady(); }));
}

// Scenario (see Note [Early arrivals]): worker0 creates a value on worker1 and
// sends the reference straight back to worker1, whose call is served before
// the creation. worker1 recognises its own value: the entry is made on
// arrival and freed again when the call's handle dies (nobody else knows of
// it yet); the creation then makes it for good. Nothing leaks.
TEST_F(RRefProtocolTest, ReferenceReachesItsOwnerBeforeCreation) {
  RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{2});
  auto mine = rt(0).RpcAsync<bool>("worker1", "is_owner", t);
  ASSERT_TRUE(network_->DeliverFirst(Request("is_owner")));
  EXPECT_EQ(stats(1).owned_values, 0u);  // made, used, and freed again
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.remote")));
  EXPECT_EQ(stats(1).owned_values, 1u);
  ASSERT_TRUE(Settle([&] { return mine.IsReady() && stats(0).pending_children == 0; }));
  EXPECT_TRUE(*mine.Wait(absl::ZeroDuration()));
  auto fetched = t.to_here_async();
  ASSERT_TRUE(Settle([&] { return fetched.IsReady(); }));
  EXPECT_TRUE(at::equal(*fetched.Wait(absl::ZeroDuration()), at::ones({2}) * 2));
  t = RRef<at::Tensor>();
  ASSERT_TRUE(Settle([&] { return stats(1).owned_values == 0; }));
}

// Scenario (a user dies while its fork request is in flight): worker2
// receives worker0's RRef and asks worker1 for a fork, then dies; worker1
// learns of the death before it serves the request (handlers run
// concurrently, so the report can overtake a request received earlier).
// The late request must not register a fork for the dead worker — it would
// pin the value for the rest of the job. When worker0 drops its handle the
// value is freed.
TEST_F(RRefProtocolTest, ForkRequestOfAWorkerReportedGoneIsRefused) {
  RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{2});
  ASSERT_TRUE(Settle([&] { return t.confirmed_by_owner(); }));
  auto kept = rt(0).RpcAsync<int64_t>("worker2", "keep", t);
  ASSERT_TRUE(network_->DeliverFirst(Request("keep")));

  rrefs(1).OnPeerUnavailable(2);  // as the runtime reports a broken connection
  rrefs(0).OnPeerUnavailable(2);
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.fork")));
  EXPECT_EQ(stats(1).known_forks, 1u);  // worker0's only

  t = RRef<at::Tensor>();
  ASSERT_TRUE(Settle([&] { return stats(1).owned_values == 0 && kept.IsReady(); }));
  // worker2 is alive here (unlike after a real death) and still holds its
  // refused handle: drop it so the job ends clean.
  auto dropped = rt(0).RpcAsync<void>("worker2", "drop_kept");
  ASSERT_TRUE(Settle([&] { return dropped.IsReady(); }));
}

// Scenario (the creator dies while its creation is in flight): worker1
// learns that worker0 is gone before it serves worker0's remote(). The value
// is produced (its side effects were asked for) but not kept: nobody alive
// references it.
TEST_F(RRefProtocolTest, CreationOfAWorkerReportedGoneIsNotKept) {
  RRef<at::Tensor> t = Remote<at::Tensor>(rrefs(0), "worker1", "make_tensor", int64_t{2});
  rrefs(1).OnPeerUnavailable(0);
  ASSERT_TRUE(network_->DeliverFirst(Request("rref.remote")));
  EXPECT_EQ(stats(1).owned_values, 0u);
  EXPECT_EQ(stats(1).known_forks, 0u);
}

}  // namespace
}  // namespace tessera::testing
