// RRef protocol tests with real worker processes. In the style of Ray's
// reference-counter tests: each opens with its scenario, and every test ends
// with the world's graceful shutdown, which fails if any worker still owns a
// value that another worker references (RRefContext::CheckReleased), plus
// explicit zero-leak checks where the scenario frees values mid-job.
#include <ATen/TensorOperators.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/rref/rref_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rref::Remote;
using rref::RemoteObject;
using rref::RRef;

class RRefTest : public RRefWorld {
 protected:
  // Waits until `worker` owns exactly `n` values (deletes are asynchronous).
  bool OwnerHolds(const std::string& worker, int64_t n) {
    return rt().RpcSync<bool>(worker, "await_owned", n, int64_t{30000});
  }
};

// Scenario: worker0 creates a tensor on worker1, fetches it, drops it.
// worker1 frees it while the job runs.
TEST_F(RRefTest, CreateFetchDelete) {
  StartWorld(2);
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker1", "make_tensor", int64_t{3});
    EXPECT_FALSE(t.is_owner());
    EXPECT_EQ(t.owner_name(), "worker1");
    EXPECT_TRUE(at::equal(t.to_here(), at::ones({3}) * 3));
    // The creator's fetch need not wait for the creation's acknowledgement
    // (see Note [Early arrivals]); the acknowledgement still comes.
    EXPECT_TRUE(t.impl()->Confirmed().Wait(absl::Seconds(30)).ok());
    EXPECT_TRUE(t.confirmed_by_owner());
    EXPECT_TRUE(OwnerHolds("worker1", 1));
    EXPECT_EQ(StatusOf([&] { t.local_value(); }).code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_TRUE(OwnerHolds("worker1", 0));
  EXPECT_EQ(rrefs_->stats().user_forks, 0u);
}

// Scenario: worker0 creates two values with a function it registers only
// afterwards, which blocks until released. See Note [Deferred calls]: once
// registered, both run on the pool, side by side — not inside Register(),
// one after another (there each ran out its time before the test could
// release it).
TEST_F(RRefTest, CreationsWaitingForALateFunctionRunOnThePool) {
  StartWorld(1);
  std::vector<RRef<bool>> early;
  for (int i = 0; i < 2; ++i) {
    early.push_back(Remote<bool>(*rrefs_, "worker0", "late_block", absl::StrCat("late/", i)));
  }
  // Behind both creations on the pool: they wait for "late_block" by now.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker0", "echo", int64_t{1}), 1);
  rt().Register("late_block", [](rpc::CallContext& ctx, std::string key) {
    ctx.deadline = std::min(ctx.deadline, absl::Now() + absl::Seconds(20));
    return BlockUntilReleased(ctx, key);
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(rt().store().Get(absl::StrCat("late/", i, "/started"), absl::Seconds(10)).ok())
        << "creation " << i;
    ASSERT_TRUE(rt().store().Set(absl::StrCat("late/", i), "go").ok());
  }
  for (auto& value : early) EXPECT_TRUE(value.to_here()) << "ran out its time before release";
}

// Scenario: worker0 makes an object on worker1 whose constructor is slow,
// and calls a blocking method on it twice before it is built. See Note
// [Deferred calls]: once built, both run on worker1's pool side by side —
// not one after another on the thread that built it (the second would
// start only after the first returned).
TEST_F(RRefTest, MethodCallsWaitingForTheirObjectRunOnThePool) {
  StartWorld(2);
  RRef<SlowToBuild> slow = RemoteObject<SlowToBuild>(*rrefs_, "worker1");
  std::vector<Future<bool>> calls;
  for (int i = 0; i < 2; ++i) {
    calls.push_back(slow.RpcAsync<bool>("block", absl::StrCat("built/", i)));
  }
  // Behind both calls on the connection: they wait for the object by now.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{1}), 1);
  EXPECT_TRUE(rt().RpcSync<bool>("worker1", "finish_building_slow_objects"));
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(rt().store().Get(absl::StrCat("built/", i, "/started"), absl::Seconds(10)).ok())
        << "method call " << i << " did not start while the other ran";
  }
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(rt().store().Set(absl::StrCat("built/", i), "go").ok());
  for (auto& call : calls) {
    auto released = call.Wait(absl::Seconds(30));
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_TRUE(*released) << "ran out its time before release";
  }
}

// Scenario: an object lives on worker1; worker0 calls its methods, also
// concurrently, and cannot fetch the object itself.
TEST_F(RRefTest, MethodCallsOnARemoteObject) {
  StartWorld(2);
  RRef<Counter> counter = RemoteObject<Counter>(*rrefs_, "worker1", int64_t{5});
  EXPECT_EQ(counter.RpcSync<int64_t>("add", int64_t{3}), 8);
  std::vector<Future<int64_t>> adds;
  for (int i = 0; i < 200; ++i) adds.push_back(counter.RpcAsync<int64_t>("add", int64_t{1}));
  for (auto& f : adds) ASSERT_TRUE(f.Wait(absl::Seconds(30)).ok());
  EXPECT_EQ(counter.RpcSync<int64_t>("get"), 208);
  auto fetched = counter.to_here_value_async().Wait(absl::Seconds(30));
  EXPECT_EQ(fetched.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(fetched.status().message().find("objects stay on their owner"), std::string::npos);
  // remote() of a method keeps its result on the owner.
  RRef<int64_t> later = counter.Remote<int64_t>("add", int64_t{2});
  EXPECT_EQ(later.to_here(), 210);
  auto unknown = counter.RpcAsync<int64_t>("no_such_method").Wait(absl::Seconds(30));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  // A method that returns a future (it calls a third worker) holds no thread.
  EXPECT_EQ(counter.RpcSync<int64_t>("add_remote_echo", std::string("worker0"), int64_t{5}),
            215);
  auto wrong = counter.RpcAsync<int64_t>("add", "not a number").Wait(absl::Seconds(30));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("'add' expects (int) -> int"), std::string::npos)
      << wrong.status();
}

// Scenario: worker2 still holds a reference to worker1's value when the job
// shuts down. Graceful shutdown releases it and every worker exits cleanly
// with nothing leaked (TearDown checks the exit codes; the owner's shutdown
// would fail if a referenced value remained).
TEST_F(RRefTest, GracefulShutdownReleasesReferencesStillHeld) {
  StartWorld(3);
  RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker1", "make_tensor", int64_t{2});
  EXPECT_EQ(rt().RpcSync<int64_t>("worker2", "keep", t), 1);
  EXPECT_EQ(rt().RpcSync<double>("worker2", "relay_rref", std::vector<std::string>{}, t), 4.0);
  EXPECT_TRUE(rt().TryShutdown().ok());
  for (auto& child : children_) EXPECT_EQ(child->Wait(absl::Seconds(60)), 0);
}

// Scenario: the constructor throws on the owner. The error, with its
// message, surfaces on to_here() and on every method call.
TEST_F(RRefTest, ExceptionInConstructorSurfacesEverywhere) {
  StartWorld(2);
  RRef<Failing> broken = RemoteObject<Failing>(*rrefs_, "worker1", std::string("boom in ctor"));
  auto call = broken.RpcAsync<int64_t>("never").Wait(absl::Seconds(30));
  // UNKNOWN: the constructor raised (rref/class_registry.h), on every use.
  ASSERT_EQ(call.status().code(), absl::StatusCode::kUnknown) << call.status();
  EXPECT_NE(call.status().message().find("boom in ctor"), std::string::npos) << call.status();
  auto again = broken.RpcAsync<int64_t>("never").Wait(absl::Seconds(30));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnknown) << again.status();
  EXPECT_NE(again.status().message().find("boom in ctor"), std::string::npos);
  auto value = Remote<int64_t>(*rrefs_, "worker1", "fail", "bad function")
                   .to_here_async()
                   .Wait(absl::Seconds(30));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnknown) << value.status();
  EXPECT_NE(value.status().message().find("bad function"), std::string::npos) << value.status();
}

// Scenario: worker0 creates a value on worker1 and passes the RRef along
// worker2 -> worker3, which fetches it. Every fork is confirmed and released;
// worker1 ends up owning nothing once worker0 drops its reference.
TEST_F(RRefTest, ForkChainAcrossFourWorkers) {
  StartWorld(4);
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker1", "make_tensor", int64_t{4});
    double sum = rt().RpcSync<double>("worker2", "relay_rref",
                                      std::vector<std::string>{"worker3"}, t);
    EXPECT_EQ(sum, 16.0);
    // A second chain that passes through the owner itself.
    sum = rt().RpcSync<double>("worker3", "relay_rref",
                               std::vector<std::string>{"worker1", "worker2"}, t);
    EXPECT_EQ(sum, 16.0);
    // A third that comes back to its creator (this worker).
    sum = rt().RpcSync<double>("worker2", "relay_rref",
                               std::vector<std::string>{"worker0"}, t);
    EXPECT_EQ(sum, 16.0);
  }
  EXPECT_TRUE(OwnerHolds("worker1", 0));
  EXPECT_EQ(rrefs_->stats().pending_children, 0u);
}

// Scenario: remote() aimed at the caller itself keeps the value here; the
// handle is the owner's, and nothing travels.
TEST_F(RRefTest, RemoteOnItselfKeepsTheValueLocally) {
  StartWorld(2);
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker0", "make_tensor", int64_t{2});
    EXPECT_TRUE(t.is_owner());
    EXPECT_TRUE(at::equal(t.local_value(), at::ones({2}) * 2));
    RRef<Counter> counter = RemoteObject<Counter>(*rrefs_, "worker0", int64_t{1});
    EXPECT_EQ(counter.RpcSync<int64_t>("add", int64_t{2}), 3);
    EXPECT_EQ(counter.local_object()->Get(), 3);
    EXPECT_EQ(counter.Remote<int64_t>("get").to_here(), 3);
    // t and counter; the handle Remote<>("get") made died with its statement.
    EXPECT_EQ(rrefs_->stats().owned_values, 2u);
  }
  EXPECT_EQ(rrefs_->stats().owned_values, 0u);  // freed when the handles died
}

// Scenario: an RRef goes back to its owner, which sees its own value.
TEST_F(RRefTest, RRefReturnedToItsOwner) {
  StartWorld(2);
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker1", "make_tensor", int64_t{2});
    auto check = rt().RpcSync<std::vector<double>>("worker1", "owner_check", t);
    EXPECT_EQ(check, (std::vector<double>{1.0, 4.0}));
  }
  EXPECT_TRUE(OwnerHolds("worker1", 0));
}

// Scenario: worker2 creates a value on worker1 and returns the RRef to
// worker0 (its creator passes it on as a result).
TEST_F(RRefTest, RRefReturnedAsAResult) {
  StartWorld(3);
  {
    auto t = rt().RpcSync<RRef<at::Tensor>>("worker2", "make_on", std::string("worker1"),
                                            int64_t{5});
    EXPECT_EQ(t.owner_name(), "worker1");
    EXPECT_TRUE(at::equal(t.to_here(), at::ones({5}) * 5));
  }
  EXPECT_TRUE(OwnerHolds("worker1", 0));
}

// Scenario: 10,000 short-lived RRefs, at most 64 alive at once. The owner's
// table never grows past what is alive and ends empty.
TEST_F(RRefTest, ManyShortLivedRRefsKeepOwnerMemoryFlat) {
  StartWorld(2);
  std::deque<RRef<int64_t>> alive;
  for (int64_t i = 0; i < 10000; ++i) {
    alive.push_back(Remote<int64_t>(*rrefs_, "worker1", "echo", i));
    if (alive.size() == 64) {
      EXPECT_EQ(alive.front().to_here(), i - 63);
      alive.pop_front();
    }
  }
  alive.clear();
  EXPECT_TRUE(OwnerHolds("worker1", 0));
  EXPECT_EQ(rrefs_->stats().user_forks, 0u);
}

// Scenario: a forged RRef id is an error on the owner, not a crash.
TEST_F(RRefTest, ForgedIdIsAnError) {
  // The sneaky call below fails once worker1 waited for its function's
  // registration: 1 s, not the default 10 s.
  StartWorld(2, {{"TESSERA_TEST_REGISTRATION_WAIT_S", "1"}});
  auto result = rt().CallInternal(1, "rref.fetch", {c10::IValue(int64_t{7}),
                                                    c10::IValue(int64_t{123456}),
                                                    c10::IValue(false)})
                    .Wait(absl::Seconds(30));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  // A request that claims to be early waits for the creation, but only
  // until its deadline.
  auto early = rt().CallInternal(1, "rref.fetch",
                                 {c10::IValue(int64_t{7}), c10::IValue(int64_t{123457}),
                                  c10::IValue(true)},
                                 rpc::CallOptions{absl::Milliseconds(300)})
                   .Wait(absl::Seconds(30));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded) << early.status();
  auto deleted = rt().CallInternal(1, "rref.delete",
                                   {c10::IValue(int64_t{7}), c10::IValue(int64_t{1}),
                                    c10::IValue(int64_t{7}), c10::IValue(int64_t{2})})
                     .Wait(absl::Seconds(30));
  EXPECT_EQ(deleted.status().code(), absl::StatusCode::kNotFound);
  // User functions cannot reach internal services, nor the reverse.
  auto sneaky = rt().CallAsync("worker1", "rref.fetch", {}).Wait(absl::Seconds(30));
  EXPECT_EQ(sneaky.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{3}), 3);
}

// Scenario: the owner dies. Calls through the RRef fail with "unavailable"
// naming it, instead of hanging.
TEST_F(RRefTest, OwnerDeathFailsCallsNamingTheOwner) {
  expect_clean_exit_ = false;
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}}, absl::Seconds(5));
  RRef<Counter> counter = RemoteObject<Counter>(*rrefs_, "worker2", int64_t{1});
  EXPECT_EQ(counter.RpcSync<int64_t>("get"), 1);
  children_[1]->Kill();
  ASSERT_NE(children_[1]->Wait(absl::Seconds(30)), -1);
  auto result = counter.RpcAsync<int64_t>("get").Wait(absl::Seconds(30));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_NE(result.status().message().find("worker2"), std::string::npos);
}

// Scenario: worker2 holds a fork of worker1's value and dies. Once worker0
// drops its own reference, worker1 frees the value: the dead holder's fork
// was released when worker1 learned it was gone.
TEST_F(RRefTest, UserDeathReleasesItsReferences) {
  expect_clean_exit_ = false;
  StartWorld(3, {{"TESSERA_TEST_SHUTDOWN_TIMEOUT_S", "5"}}, absl::Seconds(5));
  {
    RRef<at::Tensor> t = Remote<at::Tensor>(*rrefs_, "worker1", "make_tensor", int64_t{1});
    EXPECT_EQ(rt().RpcSync<int64_t>("worker2", "keep", t), 1);
    // worker2's fork request reached worker1 before this answer; whether
    // worker1 serves it before or after it learns of the death, no fork of
    // the dead worker may remain (rref_protocol_test replays the late order).
    EXPECT_EQ(rt().RpcSync<double>("worker2", "relay_rref", std::vector<std::string>{}, t),
              1.0);
    children_[1]->Kill();
    ASSERT_NE(children_[1]->Wait(absl::Seconds(30)), -1);
    // worker1 learns of the death when its connection to worker2 breaks,
    // which the next message to worker2 forces at the latest.
    (void)rt().CallAsync("worker2", "echo", {c10::IValue(1)}).Wait(absl::Seconds(30));
  }
  EXPECT_TRUE(OwnerHolds("worker1", 0));
}

// GuardedCounter allows only worker0: worker0 creates and uses one on
// worker1; worker2 can neither call a method of it (holding its RRef) nor
// create one. Both refusals name the class and worker2.
TEST_F(RRefTest, AllowListedClassRefusesOtherWorkers) {
  StartWorld(3);
  RRef<GuardedCounter> counter = RemoteObject<GuardedCounter>(*rrefs_, "worker1", int64_t{5});
  EXPECT_EQ(counter.RpcSync<int64_t>("add", int64_t{1}), 6);

  auto call = rt().RpcAsync<int64_t>("worker2", "add_to_guarded", counter, int64_t{1})
                  .Wait(absl::Seconds(60));
  ASSERT_EQ(call.status().code(), absl::StatusCode::kPermissionDenied) << call.status();
  EXPECT_NE(call.status().message().find("permission denied: worker 'worker2'"),
            std::string::npos) << call.status();
  EXPECT_NE(call.status().message().find("method 'add' of class 'GuardedCounter'"),
            std::string::npos) << call.status();

  auto create = rt().RpcAsync<int64_t>("worker2", "make_guarded_on", std::string("worker1"))
                    .Wait(absl::Seconds(60));
  ASSERT_EQ(create.status().code(), absl::StatusCode::kPermissionDenied) << create.status();
  EXPECT_NE(create.status().message().find("class 'GuardedCounter'"), std::string::npos)
      << create.status();
  EXPECT_NE(create.status().message().find("permission denied"), std::string::npos)
      << create.status();
  // The refused call changed nothing.
  EXPECT_EQ(counter.RpcSync<int64_t>("add", int64_t{0}), 6);
}

}  // namespace
}  // namespace tessera::testing
