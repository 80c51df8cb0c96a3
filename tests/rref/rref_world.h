// RRefWorld: RpcWorld whose workers (rank 0 here, the children in the
// "serve_rref" scenario) all carry an RRefContext with the test classes and
// functions below.
#pragma once

#include <mutex>
#include <vector>

#include "rref/remote.h"
#include "tests/testing/rpc_world.h"

namespace tessera::testing {

// A counter whose methods may run concurrently.
class Counter {
 public:
  explicit Counter(int64_t start) : value_(start) {}
  int64_t Add(int64_t delta) {
    std::lock_guard<std::mutex> lock(mu_);
    return value_ += delta;
  }
  int64_t Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return value_;
  }
  // Asynchronous method: the result comes from another worker's function.
  Future<int64_t> AddRemoteEcho(rpc::CallContext& ctx, std::string worker, int64_t delta) {
    return ctx.runtime->RpcAsync<int64_t>(worker, "echo", delta)
        .Then([this](const absl::StatusOr<int64_t>& d) -> absl::StatusOr<int64_t> {
          if (!d.ok()) return d.status();
          return Add(*d);
        });
  }

 private:
  mutable std::mutex mu_;
  int64_t value_;
};

// A Counter only worker0 may create or call (an allow-listed class).
class GuardedCounter : public Counter {
 public:
  using Counter::Counter;
};

// Its constructor always throws.
class Failing {
 public:
  explicit Failing(std::string why) { throw std::runtime_error(why); }
  int64_t Never() { return 0; }
};

// Slow to build: its constructor waits (up to 30 s) until
// FinishBuildingSlowObjects() runs in its process. Its method "block" is the
// test function "block" (BlockUntilReleased), for at most 20 s.
class SlowToBuild {
 public:
  SlowToBuild();
  bool Block(rpc::CallContext& ctx, std::string key);
};
void FinishBuildingSlowObjects();

rref::ClassRegistry MakeTestClasses();

// The RPC test functions plus: make_tensor(n) -> ones(n)*n; relay_rref(chain,
// rref) passes the RRef along `chain` and the last worker returns
// to_here().sum(); owner_check(rref) -> [is_owner, local sum];
// is_owner(rref) -> bool (does not wait for the value); keep(rref)
// holds the RRef until drop_kept(); await_owned(n, timeout_ms) -> bool;
// make_on(worker, n) -> RRef made by this worker on `worker`;
// finish_building_slow_objects() -> true (FinishBuildingSlowObjects()).
rpc::Registry MakeRRefTestRegistry(std::shared_ptr<rref::RRefContext> context);

class RRefWorld : public RpcWorld {
 protected:
  std::string ChildScenario() const override { return "serve_rref"; }
  rpc::Registry MakeRegistry() override;
  std::vector<std::shared_ptr<rpc::RuntimeExtension>> MakeExtensions() override;

  std::shared_ptr<rref::RRefContext> rrefs_ = rref::RRefContext::Create(MakeTestClasses());
};

}  // namespace tessera::testing
