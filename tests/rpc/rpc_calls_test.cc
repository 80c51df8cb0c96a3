// Multi-process RPC tests: real workers, real TensorPipe, 127.0.0.1.
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "rpc/init.h"
#include "tests/testing/rpc_world.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {
namespace {

using rpc::CallOptions;

class RpcCallsTest : public RpcWorld {};

// Equality by value: tensors elementwise, containers recursively (IValue's
// own == also compares list element types, which the wire does not keep for
// nested containers).
bool StructurallyEqual(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() && b.isTensor()) {
    return a.toTensor().sizes() == b.toTensor().sizes() &&
           a.toTensor().dtype() == b.toTensor().dtype() &&
           at::equal(a.toTensor(), b.toTensor());
  }
  if (a.isList() && b.isList()) {
    const auto& x = a.toListRef();
    const auto& y = b.toListRef();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!StructurallyEqual(x[i], y[i])) return false;
    }
    return true;
  }
  if (a.isGenericDict() && b.isGenericDict()) {
    auto x = a.toGenericDict();
    auto y = b.toGenericDict();
    if (x.size() != y.size()) return false;
    for (const auto& entry : x) {
      auto it = y.find(entry.key());
      if (it == y.end() || !StructurallyEqual(entry.value(), it->value())) return false;
    }
    return true;
  }
  return a == b;
}

// A worker listening on a wildcard publishes the address it was told to
// advertise, with the port it bound (the cross-host form of this is
// tests/multihost's AWorkerMayAdvertiseAnotherAddressThanItListensOn).
TEST_F(RpcCallsTest, AWorkerPublishesTheAddressItAdvertisesNotTheWildcardItListensOn) {
  StartWorld(2, {{"TESSERA_ADDRESS", "0.0.0.0"}, {"TESSERA_ADVERTISE_ADDRESS", "127.0.0.2"}});
  const std::string address = rt().GetWorkerInfo("worker1").address;
  EXPECT_NE(address.find("127.0.0.2:"), std::string::npos) << address;
  EXPECT_EQ(address.find("0.0.0.0"), std::string::npos) << address;
  auto echoed =
      rt().CallAsync("worker1", "echo", {c10::IValue(int64_t{7})}).Wait(absl::Seconds(30));
  ASSERT_TRUE(echoed.ok()) << echoed.status();
  EXPECT_EQ(echoed->toInt(), 7);
}

TEST_F(RpcCallsTest, EchoesEveryValueType) {
  StartWorld(2);
  at::Tensor matrix = at::randn({4, 6});
  std::vector<c10::IValue> values = {
      c10::IValue(),
      c10::IValue(true),
      c10::IValue(int64_t{-42}),
      c10::IValue(3.25),
      c10::IValue(std::string("héllo\0bytes", 12)),
      c10::IValue(matrix),
      c10::IValue(matrix.t()),                  // non-contiguous view
      c10::IValue(matrix.narrow(0, 1, 2)),      // contiguous view with offset
      c10::IValue(at::ones({0, 3})),            // empty
      c10::IValue(at::arange(10, at::kLong)),
      rpc::ToIValue(std::vector<at::Tensor>{matrix, matrix * 2}),
      rpc::ToIValue(std::vector<std::vector<int64_t>>{{1, 2}, {}, {3}}),
      rpc::ToIValue(std::map<std::string, double>{{"a", 1.5}, {"b", -2}}),
  };
  for (const auto& value : values) {
    auto echoed = rt().CallAsync("worker1", "echo", {value}).Wait(absl::Seconds(30));
    ASSERT_TRUE(echoed.ok()) << echoed.status();
    EXPECT_EQ(rpc::DescribeIValue(*echoed), rpc::DescribeIValue(value));
    EXPECT_TRUE(StructurallyEqual(*echoed, value)) << *echoed << " vs " << value;
  }
  // Typed arguments of every kind reach a typed function intact.
  std::string described = rt().RpcSync<std::string>(
      "worker1", "describe", at::ones({2, 2}), int64_t{7}, 0.5, true,
      std::string("s"), std::vector<int64_t>{1, 2, 3},
      std::map<std::string, double>{{"x", 1.0}});
  EXPECT_EQ(described, "4|7|0.5|true|s|1,2,3|x=1");
}

TEST_F(RpcCallsTest, ThousandConcurrentAsyncCalls) {
  StartWorld(2);
  std::vector<Future<at::Tensor>> futures;
  for (int i = 0; i < 1000; ++i) {
    futures.push_back(rt().RpcAsync<at::Tensor>("worker1", "add", at::ones({2}) * i,
                                                at::ones({2})));
  }
  for (int i = 0; i < 1000; ++i) {
    auto result = futures[i].Wait(absl::Seconds(60));
    ASSERT_TRUE(result.ok()) << i << ": " << result.status();
    EXPECT_TRUE(at::equal(*result, at::ones({2}) * (i + 1))) << i;
  }
}

TEST_F(RpcCallsTest, NestedCallsAcrossThreeWorkersDoNotDeadlock) {
  StartWorld(3);
  // worker0 -> worker1 -> worker2 -> worker0 -> worker1, each hop adds one.
  std::vector<std::string> chain = {"worker2", "worker0", "worker1"};
  at::Tensor sync = rt().RpcSync<at::Tensor>("worker1", "nested", chain, at::zeros({3}));
  EXPECT_TRUE(at::equal(sync, at::full({3}, 4.0)));
  at::Tensor async =
      rt().RpcSync<at::Tensor>("worker1", "async_nested", chain, at::zeros({3}));
  EXPECT_TRUE(at::equal(async, at::full({3}, 4.0)));
  // Many nested chains at once, more than the pool has threads: async
  // handlers hold no thread; blocking ones do, and each worker's pool runs
  // others in their place (see Note [Compensating blocked pool threads]) — 32
  // chains block up to 32 handlers per worker, within max_worker_threads.
  std::vector<Future<at::Tensor>> futures;
  for (int i = 0; i < 64; ++i) {
    futures.push_back(
        rt().RpcAsync<at::Tensor>("worker2", "async_nested", chain, at::zeros({1})));
  }
  for (int i = 0; i < 32; ++i) {
    futures.push_back(rt().RpcAsync<at::Tensor>("worker2", "nested", chain, at::zeros({1})));
  }
  for (auto& f : futures) {
    auto r = f.Wait(absl::Seconds(60));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->item<float>(), 4.0f);
  }
}

TEST_F(RpcCallsTest, AsyncHandlerCompletesLater) {
  StartWorld(2);
  at::Tensor sum =
      rt().RpcSync<at::Tensor>("worker1", "async_add", at::ones({5}), at::ones({5}));
  EXPECT_TRUE(at::equal(sum, at::full({5}, 2.0)));
}

TEST_F(RpcCallsTest, RemoteErrorsNameTheProblemAndTheWorker) {
  // The call to no_such_fn fails once worker1 waited for its registration:
  // 1 s, not the default 10 s.
  StartWorld(2, {{"TESSERA_TEST_REGISTRATION_WAIT_S", "1"}});
  auto raised = rt().RpcAsync<int64_t>("worker1", "fail", "boom at step 3")
                    .Wait(absl::Seconds(30));
  ASSERT_FALSE(raised.ok());
  EXPECT_EQ(raised.status().code(), absl::StatusCode::kUnknown);
  EXPECT_NE(raised.status().message().find("boom at step 3"), std::string::npos);
  EXPECT_NE(raised.status().message().find("worker1"), std::string::npos);

  auto unknown = rt().CallAsync("worker1", "no_such_fn", {}).Wait(absl::Seconds(30));
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("no_such_fn"), std::string::npos);

  auto wrong_type = rt().RpcAsync<at::Tensor>("worker1", "add", at::ones({1}), "text")
                        .Wait(absl::Seconds(30));
  EXPECT_EQ(wrong_type.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_type.status().message().find(
                "'add' expects (Tensor, Tensor) -> Tensor but got (Tensor, str)"),
            std::string::npos)
      << wrong_type.status();

  auto wrong_arity =
      rt().RpcAsync<at::Tensor>("worker1", "add", at::ones({1})).Wait(absl::Seconds(30));
  EXPECT_EQ(wrong_arity.status().code(), absl::StatusCode::kInvalidArgument);

  auto wrong_result = rt().RpcAsync<std::string>("worker1", "add", at::ones({1}),
                                                 at::ones({1}))
                          .Wait(absl::Seconds(30));
  EXPECT_EQ(wrong_result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_result.status().message().find("returned Tensor, expected str"),
            std::string::npos);

  EXPECT_THROW(rt().RpcSync<int64_t>("worker1", "fail", "again"), StatusError);
  // The callee is unharmed.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{5}), 5);
}

TEST_F(RpcCallsTest, PerCallTimeoutFires) {
  StartWorld(2);
  CallOptions short_timeout{absl::Milliseconds(300)};
  auto result = rt().RpcAsync<bool>(short_timeout, "worker1", "block", "never-set")
                    .Wait(absl::Seconds(30));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(result.status().message().find("worker1"), std::string::npos);
  // And the worker keeps serving.
  EXPECT_EQ(rt().RpcSync<int64_t>("worker1", "echo", int64_t{9}), 9);
}

TEST_F(RpcCallsTest, UnknownWorkerIsAnError) {
  StartWorld(2);
  auto result = rt().CallAsync("nobody", "echo", {c10::IValue(1)}).Wait(absl::Seconds(5));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(result.status().message().find("nobody"), std::string::npos);
}

}  // namespace
}  // namespace tessera::testing

namespace tessera::testing {
namespace {

// A call that gives no timeout gets the runtime's default_call_timeout.
TEST(RuntimeLifecycleTest, DefaultCallTimeoutAppliesWhenNoneIsGiven) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("solo", 0, 1, (*store)->port());
  options.default_call_timeout = absl::Milliseconds(300);
  rpc::Registry registry = MakeTestRegistry();
  // Answers a second after the call's deadline, so the answer can never
  // beat the caller's timer (however late a loaded machine wakes it).
  registry.Register("answer_late", [](rpc::CallContext& ctx) {
    return ctx.runtime->store()
        .Get("never-set", ctx.deadline - absl::Now() + absl::Seconds(1))
        .ok();
  });
  auto runtime = rpc::TryInit(options, std::move(registry));
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  auto result = (*runtime)->RpcAsync<bool>("solo", "answer_late").Wait(absl::Seconds(30));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_TRUE((*runtime)->TryShutdown().ok());
}

// Scenario: a process starts a runtime, uses it, shuts it down, and starts a
// new one (new store, new listener) — no singleton state survives to break
// the second. A world of one also calls itself through the transport.
TEST(RuntimeLifecycleTest, CleanRestartInTheSameProcess) {
  for (int generation = 0; generation < 2; ++generation) {
    auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
    ASSERT_TRUE(store.ok());
    auto runtime =
        rpc::TryInit(InProcessOptions("solo", 0, 1, (*store)->port()), MakeTestRegistry());
    ASSERT_TRUE(runtime.ok()) << runtime.status();
    EXPECT_EQ((*runtime)->RpcSync<int64_t>("solo", "echo", int64_t{generation}), generation);
    EXPECT_TRUE((*runtime)->TryShutdown().ok());
    // After shutdown, calls fail cleanly instead of hanging.
    auto after = (*runtime)->CallAsync("solo", "echo", {c10::IValue(1)}).Wait(absl::Seconds(5));
    EXPECT_EQ(after.status().code(), absl::StatusCode::kFailedPrecondition) << after.status();
  }
}

// See Note [Late registration]: a function registered after start is served,
// including to a call that arrived before it was registered; a name never
// registered fails after registration_wait, naming the worker and what it has.
TEST(RuntimeLifecycleTest, FunctionsRegisteredAfterStartAreServed) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("solo", 0, 1, (*store)->port());
  options.registration_wait = absl::Seconds(2);
  auto runtime = rpc::Init(options);
  // Sent before "late" exists: it waits for the registration below.
  auto early = runtime->RpcAsync<int64_t>("solo", "late", int64_t{20});
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (runtime->registry().CallsWaitingFor("late") == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(runtime->registry().CallsWaitingFor("late"), 1u) << "the call never arrived";
  EXPECT_FALSE(early.IsReady());
  runtime->Register("late", [](int64_t x) { return x + 1; });
  EXPECT_EQ(early.Get(absl::Seconds(30)), 21);
  EXPECT_EQ(runtime->RpcSync<int64_t>("solo", "late", int64_t{1}), 2);
  // Registering a name twice is a programming error: it throws at once.
  EXPECT_EQ(StatusOf([&] { runtime->Register("late", [] { return 0; }); }).code(),
            absl::StatusCode::kAlreadyExists);
  auto never = runtime->RpcAsync<int64_t>("solo", "never_registered").Wait(absl::Seconds(30));
  EXPECT_EQ(never.status().code(), absl::StatusCode::kNotFound) << never.status();
  EXPECT_NE(never.status().message().find(
                "no function named 'never_registered' is registered on worker 'solo'"),
            std::string::npos)
      << never.status();
  EXPECT_NE(never.status().message().find("late"), std::string::npos) << never.status();
  runtime->Shutdown();
}

// Calls that waited for a late registration run on the pool once it comes,
// side by side — not inside Register(), on the registering thread, one
// after another (which held the registering thread for each call's whole
// run, and ran out the others' deadlines meanwhile).
TEST(RuntimeLifecycleTest, CallsWaitingForARegistrationRunOnThePoolNotInRegister) {
  auto store = store::StoreServer::Start("127.0.0.1", 0, TestJobSecret());
  ASSERT_TRUE(store.ok());
  rpc::RpcOptions options = InProcessOptions("solo", 0, 1, (*store)->port());
  options.registration_wait = absl::Seconds(60);
  auto runtime = rpc::Init(options, MakeTestRegistry());
  const rpc::CallOptions bounded{absl::Seconds(20)};
  std::vector<Future<bool>> early;
  for (int i = 0; i < 2; ++i) {
    early.push_back(
        runtime->RpcAsync<bool>(bounded, "solo", "late_block", absl::StrCat("late/", i)));
  }
  // Requests on one connection are dispatched in order: once this answer
  // is back, both early calls wait for "late_block".
  EXPECT_EQ(runtime->RpcSync<int64_t>("solo", "echo", int64_t{1}), 1);
  runtime->Register("late_block", [](rpc::CallContext& ctx, std::string key) {
    return BlockUntilReleased(ctx, key);
  });
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(runtime->store().Get(absl::StrCat("late/", i, "/started"), absl::Seconds(10)).ok())
        << "early call " << i;
    ASSERT_TRUE(runtime->store().Set(absl::StrCat("late/", i), "go").ok());
  }
  for (auto& call : early) {
    auto released = call.Wait(absl::Seconds(30));
    ASSERT_TRUE(released.ok()) << released.status();
    EXPECT_TRUE(*released) << "ran out its deadline before it was released";
  }
  runtime->Shutdown();
}

}  // namespace
}  // namespace tessera::testing
