// Worker: the one entry point of an RPC job — torch.distributed.rpc's
// init_rpc, with RRefs and distributed autograd attached.
//
//   auto worker = tessera::Worker::Start(tessera::WorkerOptions::FromEnv("ps"));
//   worker->Register("forward", [&](at::Tensor x) { return model(x); });
//   auto params = worker->RpcSync<std::vector<RRef<at::Tensor>>>("ps", "parameters");
//   auto table = worker->RemoteObject<EmbeddingTable>("ps", 1000, 16);
//   worker->Shutdown();     // waits for every worker (rpc.shutdown())
//
// A thin layer over rpc::Runtime (rpc()), rref::RRefContext (rrefs()) and
// dist_autograd::DistAutograd (autograd()): it owns one of each for this
// worker; there are no process-wide singletons, so tests may run several
// workers in one process.
//
// Set-up in any order: functions and classes may be registered before or
// after Start (see Note [Late registration], rpc/runtime.h); DistributedOptimizer's
// owner side (dist_optim::RegisterLocalOptimizer) is registered by Start.
//
// Errors (README, "Errors"): calls that finish before they return throw
// StatusError; calls that return a Future never throw. Timeouts: every
// blocking call inherits options.default_call_timeout unless given its own.
//
// Large tensors for workers on the same host can skip the copy: make them
// with rpc::EmptyInSharedMemory / rpc::ToSharedMemory (rpc/shared_tensors.h,
// included here), and only a handle travels.
//
// Thread-safety: all methods are thread-safe; Shutdown() runs once.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "common/metrics.h"
#include "dist_autograd/dist_autograd.h"
#include "rpc/rpc_options.h"
#include "rpc/runtime.h"
#include "rpc/shared_tensors.h"
#include "rpc/typed_calls.h"
#include "rref/class_registry.h"
#include "rref/remote.h"
#include "rref/rref.h"
#include "rref/rref_context.h"

namespace tessera {

// A worker's options: rpc::RpcOptions (name, rank, world, store, address,
// backend, secret, timeouts).
struct WorkerOptions : rpc::RpcOptions {
  WorkerOptions() = default;
  WorkerOptions(rpc::RpcOptions options) : rpc::RpcOptions(std::move(options)) {}  // NOLINT
  // From the environment tessera-run sets (rpc::RpcOptions::FromEnv), with
  // `name` (when not empty) as this worker's name. Throws StatusError.
  static WorkerOptions FromEnv(const std::string& name = "");
};

class Worker : public rpc::TypedCalls<Worker> {
 public:
  // Starts this worker and meets the others (bounded by
  // options.rendezvous_timeout). Throws StatusError naming what failed.
  static std::unique_ptr<Worker> Start(WorkerOptions options);
  // Forced shutdown if Shutdown() was not called.
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // --- serving ---
  template <typename Fn>
  void Register(const std::string& name, Fn fn, rpc::AllowList allowed = {}) {
    runtime_->Register(name, std::move(fn), std::move(allowed));
  }
  // Starts registering class T for RemoteObject (rref/class_registry.h).
  template <typename T>
  rref::ClassBuilder<T> RegisterClass(const std::string& name) {
    return rrefs_->classes().Class<T>(name);
  }

  // --- calling ---
  // RpcSync/RpcAsync([options,] to, function, args...): rpc/typed_calls.h.
  // remote(): runs `function` on `owner` and keeps the result there.
  template <typename R, typename... Args>
  rref::RRef<R> Remote(const std::string& owner, const std::string& function, Args&&... args) {
    return rref::Remote<R>(*rrefs_, owner, function, std::forward<Args>(args)...);
  }
  // remote() of an object of a registered class, constructed on `owner`.
  template <typename C, typename... Args>
  rref::RRef<C> RemoteObject(const std::string& owner, Args&&... args) {
    return rref::RemoteObject<C>(*rrefs_, owner, std::forward<Args>(args)...);
  }

  // --- who ---
  const std::string& name() const { return runtime_->self().name; }
  int rank() const { return runtime_->self().rank; }
  int world_size() const { return runtime_->options().world_size; }
  std::vector<rpc::WorkerInfo> workers() const { return runtime_->workers(); }
  // Who is in the job, with events to wait on (rpc/membership.h).
  rpc::Membership& membership() { return runtime_->membership(); }
  // This process's counters and latency histograms — every runtime in it
  // adds to the same ones — when metrics are on (RpcOptions::metrics,
  // TESSERA_METRICS=1, see Note [Metrics]); a snapshot with enabled = false
  // otherwise.
  metrics::MetricsSnapshot metrics() const { return metrics::Snapshot(); }

  // --- the parts ---
  rpc::Runtime& rpc() { return *runtime_; }
  rref::RRefContext& rrefs() { return *rrefs_; }
  dist_autograd::DistAutograd& autograd() { return *autograd_; }

  // rpc.shutdown(): waits until every worker has called Shutdown and no work
  // is outstanding anywhere (bounded by options.shutdown_timeout; a worker
  // that died is reported by name), then closes. Throws StatusError.
  void Shutdown();
  // Ends this worker's part early, for good, without waiting for the others
  // (elastic jobs: a trainer done before the rest; see Note [Elastic
  // membership], rpc/runtime.h). What it held elsewhere is released there.
  void Leave(const std::string& reason = "left");

 private:
  Worker() = default;
  friend class rpc::TypedCalls<Worker>;
  template <typename R, typename... Args>
  Future<rpc::ResultOf<R>> StartTypedCall(const rpc::CallOptions& options, Args&&... args) const {
    return runtime_->RpcAsync<R>(options, std::forward<Args>(args)...);
  }
  absl::Duration EffectiveTimeout(const rpc::CallOptions& options) const {
    return runtime_->EffectiveTimeout(options);
  }

  std::shared_ptr<rref::RRefContext> rrefs_;
  std::shared_ptr<dist_autograd::DistAutograd> autograd_;
  std::unique_ptr<rpc::Runtime> runtime_;  // last: closes before the parts it uses
};

}  // namespace tessera
