#include "tests/rref/rref_world.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>

#include <algorithm>
#include <cstdio>

#include "absl/synchronization/notification.h"
#include "rpc/init.h"
#include "tests/testing/test_functions.h"

namespace tessera::testing {

using rref::RRef;

namespace {
absl::Notification& SlowObjectsMayFinish() {
  static auto* finish = new absl::Notification();
  return *finish;
}
}  // namespace

SlowToBuild::SlowToBuild() {
  SlowObjectsMayFinish().WaitForNotificationWithTimeout(absl::Seconds(30));
}

bool SlowToBuild::Block(rpc::CallContext& ctx, std::string key) {
  ctx.deadline = std::min(ctx.deadline, absl::Now() + absl::Seconds(20));
  return BlockUntilReleased(ctx, key);
}

void FinishBuildingSlowObjects() { SlowObjectsMayFinish().Notify(); }

rref::ClassRegistry MakeTestClasses() {
  rref::ClassRegistry classes;
  classes.Class<Counter>("Counter")
      .Constructor<int64_t>()
      .Method("add", &Counter::Add)
      .Method("get", &Counter::Get)
      .Method("add_remote_echo", &Counter::AddRemoteEcho);
  classes.Class<GuardedCounter>("GuardedCounter")
      .Constructor<int64_t>()
      .Method("add", &GuardedCounter::Add)
      .AllowCallers(rpc::AllowList{{"worker0"}, {}});
  classes.Class<Failing>("Failing").Constructor<std::string>().Method("never", &Failing::Never);
  classes.Class<SlowToBuild>("SlowToBuild").Constructor<>().Method("block", &SlowToBuild::Block);
  return classes;
}

rpc::Registry MakeRRefTestRegistry(std::shared_ptr<rref::RRefContext> context) {
  rpc::Registry registry = MakeTestRegistry();
  registry.Register("make_tensor", [](int64_t n) { return at::ones({n}) * n; });
  registry.Register("finish_building_slow_objects", [] {
    FinishBuildingSlowObjects();
    return true;
  });
  // As this worker: add to a GuardedCounter (see also make_guarded_on).
  registry.Register("add_to_guarded", [](RRef<GuardedCounter> counter, int64_t delta) {
    return counter.RpcSync<int64_t>("add", delta);
  });
  registry.Register(
      "relay_rref",
      [](rpc::CallContext& ctx, std::vector<std::string> chain, RRef<at::Tensor> ref) -> double {
        if (chain.empty()) return ref.to_here().sum().item<double>();
        const std::string next = chain.front();
        chain.erase(chain.begin());
        return ctx.runtime->RpcSync<double>(next, "relay_rref", chain, ref);
      });
  registry.Register("owner_check", [](RRef<at::Tensor> ref) {
    const bool owner = ref.is_owner();
    return std::vector<double>{owner ? 1.0 : 0.0,
                               owner ? ref.local_value().sum().item<double>() : -1.0};
  });
  registry.Register("is_owner", [](RRef<at::Tensor> ref) { return ref.is_owner(); });
  auto kept = std::make_shared<std::vector<RRef<at::Tensor>>>();
  auto kept_mu = std::make_shared<std::mutex>();
  registry.Register("keep", [kept, kept_mu](RRef<at::Tensor> ref) {
    std::lock_guard<std::mutex> lock(*kept_mu);
    kept->push_back(std::move(ref));
    return static_cast<int64_t>(kept->size());
  });
  registry.Register("drop_kept", [kept, kept_mu]() {
    std::lock_guard<std::mutex> lock(*kept_mu);
    kept->clear();
  });
  std::weak_ptr<rref::RRefContext> weak = context;
  // As this worker: create a GuardedCounter on `owner` and use it.
  registry.Register("make_guarded_on", [weak](std::string owner) {
    auto counter = rref::RemoteObject<GuardedCounter>(*weak.lock(), owner, int64_t{0});
    return counter.RpcSync<int64_t>("add", int64_t{1});
  });
  registry.Register("await_owned", [weak](int64_t n, int64_t timeout_ms) {
    auto context = weak.lock();
    return context != nullptr &&
           context->WaitForOwnedValues(static_cast<size_t>(n), absl::Milliseconds(timeout_ms));
  });
  registry.Register("make_on", [weak](std::string worker, int64_t n) {
    auto context = weak.lock();
    return rref::Remote<at::Tensor>(*context, worker, "make_tensor", n);
  });
  return registry;
}

TESSERA_WORKER_SCENARIO(serve_rref) {
  auto context = rref::RRefContext::Create(MakeTestClasses());
  return ServeUntilShutdown(
      "serve_rref", rpc::TryInit(TestWorkerOptions(), MakeRRefTestRegistry(context), {context}));
}

rpc::Registry RRefWorld::MakeRegistry() { return MakeRRefTestRegistry(rrefs_); }

std::vector<std::shared_ptr<rpc::RuntimeExtension>> RRefWorld::MakeExtensions() {
  return {rrefs_};
}

}  // namespace tessera::testing
