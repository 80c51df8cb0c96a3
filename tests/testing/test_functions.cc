#include "tests/testing/test_functions.h"

#include "tests/testing/multiprocess.h"

#include <ATen/TensorOperators.h>

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rpc/runtime.h"

namespace tessera::testing {

using rpc::CallContext;

namespace {

constexpr absl::Duration kBlockPastDeadline = absl::Seconds(2);

}  // namespace

bool BlockUntilReleased(CallContext& ctx, const std::string& key) {
  auto& store = ctx.runtime->store();
  if (!store.Set(key + "/started", "1").ok()) return false;
  // Past the call's deadline by a margin: its caller gives up first, so a
  // test of the deadline sees it fire, not a "false" that raced it there.
  return store.Get(key, ctx.deadline + kBlockPastDeadline - absl::Now()).ok();
}

rpc::Registry MakeTestRegistry() {
  rpc::Registry registry;
  registry.Register("echo", [](c10::IValue v) { return v; });
  // Allow-listed: worker1 by name, or any worker whose role is "trusted".
  registry.Register(
      "restricted_echo", [](int64_t v) { return v; }, rpc::AllowList{{"worker1"}, {"trusted"}});
  // Calls `target`'s restricted_echo as this worker.
  registry.Register("relay_restricted_echo", [](CallContext& ctx, std::string target, int64_t v) {
    return ctx.runtime->RpcSync<int64_t>(target, "restricted_echo", v);
  });
  registry.Register("add", [](at::Tensor a, at::Tensor b) { return a + b; });
  // What this worker's membership recorded: "<event> <name>", oldest first.
  registry.Register("membership_events", [](CallContext& ctx) {
    std::vector<std::string> events;
    for (const auto& event : ctx.runtime->membership().EventsAfter(0)) {
      events.push_back(absl::StrCat(rpc::MembershipEventName(event.kind), " ", event.name));
    }
    return events;
  });
  registry.Register("fail",
                    [](std::string message) -> int64_t { throw std::runtime_error(message); });
  registry.Register("block",
                    [](CallContext& ctx, std::string key) { return BlockUntilReleased(ctx, key); });
  registry.Register("nested", [](CallContext& ctx, std::vector<std::string> chain, at::Tensor t) {
    if (chain.empty()) return t + 1;
    const std::string next = chain.front();
    chain.erase(chain.begin());
    return ctx.runtime->RpcSync<at::Tensor>(next, "nested", chain, t) + 1;
  });
  registry.Register(
      "async_nested", [](CallContext& ctx, std::vector<std::string> chain, at::Tensor t) {
        if (chain.empty()) return Future<at::Tensor>::Ready(t + 1);
        const std::string next = chain.front();
        chain.erase(chain.begin());
        return ctx.runtime->RpcAsync<at::Tensor>(next, "async_nested", chain, t)
            .Then([](const absl::StatusOr<at::Tensor>& r) -> absl::StatusOr<at::Tensor> {
              if (!r.ok()) return r.status();
              return *r + 1;
            });
      });
  registry.Register("async_add", [](CallContext& ctx, at::Tensor a, at::Tensor b) {
    Promise<at::Tensor> promise;
    ctx.runtime->executor().Post([promise, a, b] { promise.Set(a + b); });
    return promise.GetFuture();
  });
  registry.Register("describe", [](at::Tensor t, int64_t i, double d, bool b, std::string s,
                                   std::vector<int64_t> ints, std::map<std::string, double> dict) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : dict) keys.push_back(absl::StrCat(k, "=", v));
    return absl::StrCat(t.numel(), "|", i, "|", d, "|", b ? "true" : "false", "|", s, "|",
                        absl::StrJoin(ints, ","), "|", absl::StrJoin(keys, ","));
  });
  return registry;
}

rpc::RpcOptions InProcessOptions(const std::string& name, int rank, int world_size,
                                 int store_port) {
  rpc::RpcOptions options;
  options.name = name;
  options.rank = rank;
  options.world_size = world_size;
  options.master_port = store_port;
  options.store_role = rpc::StoreRole::kConnect;
  options.rendezvous_timeout = kTestRendezvousTimeout;
  options.job_secret = TestJobSecret();
  options.grpc.tls = rpc::GrpcTlsOptions::FromEnv();
  if (const char* backend = std::getenv("TESSERA_RPC_BACKEND")) {
    options.backend = rpc::ParseBackend(backend).value();
  }
  return options;
}

rpc::RpcOptions TestWorkerOptions() {
  auto options = rpc::RpcOptions::TryFromEnv();
  if (!options.ok()) throw std::runtime_error(options.status().ToString());
  options->store_role = rpc::StoreRole::kConnect;
  options->rendezvous_timeout = kTestRendezvousTimeout;
  options->shutdown_timeout = absl::Seconds(120);
  if (const char* s = std::getenv("TESSERA_TEST_SHUTDOWN_TIMEOUT_S")) {
    options->shutdown_timeout = absl::Seconds(std::atoi(s));
  }
  if (const char* s = std::getenv("TESSERA_TEST_REGISTRATION_WAIT_S")) {
    options->registration_wait = absl::Seconds(std::atoi(s));
  }
  return *std::move(options);
}

}  // namespace tessera::testing
