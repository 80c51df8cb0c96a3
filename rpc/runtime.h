// Runtime: one worker's RPC endpoint — the C++ counterpart of
// torch.distributed.rpc's init_rpc / rpc_sync / rpc_async / shutdown.
//
//   Registry registry;
//   registry.Register("add", [](at::Tensor a, at::Tensor b) { return a + b; });
//   auto runtime = Runtime::Init(options, std::move(registry));   // rendezvous
//   at::Tensor sum = (*runtime)->RpcSync<at::Tensor>("worker1", "add", x, y);
//   Future<at::Tensor> f = (*runtime)->RpcAsync<at::Tensor>("worker1", "add", x, y);
//   (*runtime)->Shutdown();                                        // graceful
//
// The runtime owns everything a worker needs (store connection and, on the
// hosting rank, the store server; the agent; the registry; the thread pool;
// the deadline timer). There are no process-wide singletons: several
// runtimes may exist in one process, one after another or side by side.
//
// Errors: CallAsync/RpcAsync futures carry absl::Status (remote errors keep
// their code and name the worker they came from). RpcSync throws
// StatusError. Every call has a deadline (CallOptions::timeout, else the
// runtime's default).
//
// Thread-safety: all methods are thread-safe; Shutdown() runs once.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/deadline_timer.h"
#include "common/future.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "rpc/registry.h"
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"
#include "rpc/runtime_extension.h"
#include "rpc/value_traits.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::rpc {

// What a typed call of R yields: `void` calls yield std::monostate.
template <typename R>
using ResultOf = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

struct CallOptions {
  // Zero means "the runtime's default_call_timeout".
  absl::Duration timeout = absl::ZeroDuration();
};

class Runtime {
 public:
  // Starts the agent, meets every other worker through the store (bounded by
  // rendezvous_timeout) and begins serving `registry`'s functions.
  static absl::StatusOr<std::unique_ptr<Runtime>> Init(
      RpcOptions options, Registry registry,
      std::vector<std::shared_ptr<RuntimeExtension>> extensions = {});
  // Forced shutdown if Shutdown() was not called.
  ~Runtime();

  const WorkerInfo& self() const { return agent_->self(); }
  const std::vector<WorkerInfo>& workers() const { return workers_; }
  absl::StatusOr<WorkerInfo> GetWorkerInfo(const std::string& name) const;
  absl::StatusOr<WorkerInfo> GetWorkerInfo(int rank) const;

  // Untyped call: arguments and result as IValues.
  Future<c10::IValue> CallAsync(const std::string& to, const std::string& function,
                                std::vector<c10::IValue> args,
                                const CallOptions& options = {});
  Future<c10::IValue> CallAsync(int to_rank, const std::string& function,
                                std::vector<c10::IValue> args,
                                const CallOptions& options = {});

  // Typed calls: arguments are converted with ValueTraits; the result is
  // checked against R (an error names what arrived instead).
  template <typename R = c10::IValue, typename... Args>
  Future<ResultOf<R>> RpcAsync(const std::string& to, const std::string& function,
                               Args&&... args) {
    return RpcAsync<R>(CallOptions{}, to, function, std::forward<Args>(args)...);
  }
  template <typename R = c10::IValue, typename... Args>
  Future<ResultOf<R>> RpcAsync(const CallOptions& options, const std::string& to,
                               const std::string& function, Args&&... args) {
    std::vector<c10::IValue> values{ToIValue(std::forward<Args>(args))...};
    auto worker = GetWorkerInfo(to);
    if (!worker.ok()) return Future<ResultOf<R>>::Ready(worker.status());
    return Typed<R>(Call(worker->rank, function, std::move(values), options, nullptr),
                    to, function, pool_.get());
  }
  template <typename R = c10::IValue, typename... Args>
  R RpcSync(const std::string& to, const std::string& function, Args&&... args) {
    return RpcSync<R>(CallOptions{}, to, function, std::forward<Args>(args)...);
  }
  template <typename R = c10::IValue, typename... Args>
  R RpcSync(const CallOptions& options, const std::string& to,
            const std::string& function, Args&&... args) {
    // The agent's timer fails the call at its deadline; the extra second
    // here only guards against a broken agent.
    auto result = RpcAsync<R>(options, to, function, std::forward<Args>(args)...)
                      .Wait(Timeout(options) + absl::Seconds(1));
    if constexpr (std::is_void_v<R>) {
      ThrowIfError(result.status());
    } else {
      return ValueOrThrow(std::move(result));
    }
  }

  // Calls an internal service (see RuntimeExtension); callbacks of the
  // returned future run on the pool.
  Future<c10::IValue> CallInternal(int to_rank, const std::string& service,
                                   std::vector<c10::IValue> args,
                                   const CallOptions& options = {});

  // Graceful: waits (up to shutdown_timeout) until no call is outstanding on
  // any worker, then closes. Forced: fails every pending call now and closes.
  // A graceful shutdown that cannot agree (a peer died) closes anyway and
  // returns the reason.
  absl::Status Shutdown(bool graceful = true);

  // For a continuation that makes calls on another thread: see
  // CallObserver::CaptureThreadState. Empty when nothing is to be carried.
  std::function<std::shared_ptr<void>()> CaptureThreadState() const {
    return observer_ != nullptr ? observer_->CaptureThreadState()
                                : std::function<std::shared_ptr<void>()>();
  }

  // The attached extension of type E (e.g. from a registered function, via
  // CallContext::runtime), or nullptr.
  template <typename E>
  E* FindExtension() const {
    for (const auto& extension : extensions_) {
      if (auto* found = dynamic_cast<E*>(extension.get())) return found;
    }
    return nullptr;
  }

  ThreadPool& executor() { return *pool_; }
  DeadlineTimer& timer() { return *timer_; }
  store::StoreClient& store() { return *store_client_; }
  const Registry& registry() const { return registry_; }
  const RpcOptions& options() const { return options_; }

 private:
  Runtime(RpcOptions options, Registry registry,
          std::vector<std::shared_ptr<RuntimeExtension>> extensions);
  absl::Status Start();
  absl::StatusOr<std::unique_ptr<RpcAgent>> CreateAgent(const HostAddress& host,
                                                        RequestHandler handler);
  // Sends a call; the returned future's callbacks run on `executor`
  // (nullptr: inline on the completing thread — internal use only).
  Future<c10::IValue> Call(int to_rank, const std::string& function,
                           std::vector<c10::IValue> args, const CallOptions& options,
                           Executor* executor, proto::MessageKind kind = proto::CALL);
  void OnPeerFailure(int rank);
  Future<Message> HandleRequest(int from_rank, Message request);
  Future<Message> Dispatch(int from_rank, const Message& request);
  absl::Duration Timeout(const CallOptions& options) const;

  template <typename R>
  static Future<ResultOf<R>> Typed(Future<c10::IValue> raw, const std::string& to,
                                   const std::string& function, Executor* executor) {
    if constexpr (std::is_same_v<R, c10::IValue>) {
      return raw.Then([](const absl::StatusOr<c10::IValue>& r) { return r; }, executor);
    } else {
      using Wire = ResultOf<R>;
      return raw.Then([to, function](const absl::StatusOr<c10::IValue>& r)
                          -> absl::StatusOr<Wire> {
        if (!r.ok()) return r.status();
        return FromIValueOr<Wire>(*r, "function '" + function + "' on worker '" + to +
                                          "' returned");
      }, executor);
    }
  }

  const RpcOptions options_;
  const Registry registry_;
  Registry internal_;  // filled by extensions in Init, then read-only
  const std::vector<std::shared_ptr<RuntimeExtension>> extensions_;
  ValueHooks* hooks_ = nullptr;  // from the extension that provides them
  CallObserver* observer_ = nullptr;  // likewise
  std::unique_ptr<store::StoreServer> store_server_;
  std::unique_ptr<store::StoreClient> store_client_;
  std::unique_ptr<DeadlineTimer> timer_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<RpcAgent> agent_;
  std::vector<WorkerInfo> workers_;  // written once, before ready_ is set
  // Set when rendezvous completed (or failed). A peer that finished its own
  // rendezvous first may call us before that; such requests wait on this.
  Promise<bool> ready_;
  Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  std::atomic<bool> shutting_down_{false};  // closing: no more peer-failure notices
};

}  // namespace tessera::rpc
