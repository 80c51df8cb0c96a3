// Runtime: one worker's RPC endpoint — the C++ counterpart of
// torch.distributed.rpc's init_rpc / rpc_sync / rpc_async / shutdown. Most
// programs start it through tessera::Worker (tessera/worker.h), which
// attaches RRefs and distributed autograd; the runtime alone serves plain
// RPC.
//
//   auto runtime = rpc::Init(options);                    // rendezvous (rpc/init.h)
//   runtime->Register("add", [](at::Tensor a, at::Tensor b) { return a + b; });
//   at::Tensor sum = runtime->RpcSync<at::Tensor>("worker1", "add", x, y);
//   Future<at::Tensor> f = runtime->RpcAsync<at::Tensor>("worker1", "add", x, y);
//   runtime->Shutdown();                    // waits for every worker, then closes
//
// The runtime owns everything a worker needs (store connection and, on the
// hosting rank, the store server; the agent; the registry; the thread pool;
// the deadline timer). There are no process-wide singletons: several
// runtimes may exist in one process, one after another or side by side.
//
// Errors (README, "Errors"): calls that finish before they return (rpc::Init,
// RpcSync, Register, Shutdown) throw StatusError; calls that return a
// Future never throw — the future carries the status (remote errors keep
// their code and name the worker they came from). Every call has a deadline
// (CallOptions::timeout, else the runtime's default_call_timeout).
//
// Note [Late registration]: functions may be registered at any time. A
// call that arrives for a name not registered yet waits for it, up to
// RpcOptions::registration_wait (and never past the call's deadline), then
// fails with NotFound naming the function, the worker and what it has. So
// workers need not agree on an order of set-up: a server may start, build
// its state, then register the functions that serve it.
//
// Note [Deferred calls]: a call that arrives before this worker has met
// everyone, or before its function is registered, waits — then runs on the
// pool like any other call (RunOn, common/future.h), never on the thread
// that ended the wait: that is the one in Create() or in Register(), which
// would run every waiting call itself, one after another, before going on.
// A blocking call then held up the worker's start, or the registering code,
// for its whole deadline, and the other waiting calls with it (found as a
// hang of CI's bounded_queues_test; tests/rpc/early_calls_test.cc and
// RuntimeLifecycleTest.CallsWaitingForARegistrationRunOnThePoolNotInRegister).
// The RRef services do the same for late classes and functions, and for
// method calls that wait for their object to be made.
//
// Note [Simultaneous rejoins]: a rejoining worker's start ends with its
// announcement to every member, and each announcement waits up to the
// rendezvous budget for its answer. Were announcements to wait for the
// receiver's start like other calls, two workers restarted at once (every
// server of a parameter-server job lost together) would each wait out the
// whole budget for the other's start — 60 s, longer than the calls of the
// trainers waiting on them (found as a 1-in-10 failure of ps_checkpoint_test
// EveryServerLostAndRestartedComesBackFromTheCheckpoint). An announcement
// touches only the membership table, the agent's address book and the
// extensions' release of the old incarnation, all in place once the
// rendezvous filled the table, so it waits only for that. And the table a
// rejoining worker read may hold the other's old address: its call there
// fails, but marks the rank failed only if no newer incarnation announced
// itself meanwhile
// (tests/rpc/rpc_faults_test.cc,
// TwoRanksRejoiningAtOnceMeetWithoutWaitingOutTheirBudgets).
//
// Note [Elastic membership]: a job's membership may change while it runs.
// A rank restarted alone (tessera-run --elastic_roles) starts with
// JoinMode::kRejoin: it takes the next incarnation of its rank from the
// store, publishes its new address and announces itself to every member
// (internal "join" service). Each member first releases whatever the old
// incarnation held (its RRef forks, its autograd contexts — as when a peer
// dies), then installs the new address (its agent drops any connection to
// the old one) and records kRejoined (rpc/membership.h). A worker started
// with kJoin takes a rank beyond the initial ones and announces itself
// the same way (kJoined); Leave() ends a worker's part early (kLeft). A
// graceful shutdown waits for the ranks that have not left, and while
// tessera-run restarts a rank it waits for its new incarnation instead of
// calling the rank dead (see Note [Shutdown liveness], rpc/shutdown_prober.h).
//
// Thread-safety: all methods are thread-safe; Shutdown() runs once.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/deadline_timer.h"
#include "common/future.h"
#include "common/host_address.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/thread_pool.h"
#include "common/timeouts.h"
#include "rpc/call_options.h"
#include "rpc/call_telemetry.h"
#include "rpc/internal_service.h"
#include "rpc/membership.h"
#include "rpc/registry.h"
#include "rpc/rpc_agent.h"
#include "rpc/rpc_options.h"
#include "rpc/runtime_extension.h"
#include "rpc/typed_calls.h"
#include "rpc/value_traits.h"
#include "store/store_client.h"
#include "store/store_server.h"

namespace tessera::rpc {

class Runtime : public TypedCalls<Runtime> {
 public:
  // Starts the agent that options.agent_factory makes, meets every other
  // worker through the store (bounded by rendezvous_timeout) and begins
  // serving `registry`'s functions (more may be registered later). Programs
  // call rpc::Init (rpc/init.h), which picks the backend's factory.
  static absl::StatusOr<std::unique_ptr<Runtime>> Create(
      RpcOptions options, Registry registry = {},
      std::vector<std::shared_ptr<RuntimeExtension>> extensions = {});
  // Forced shutdown if Shutdown() was not called.
  ~Runtime();

  // Makes `fn` callable by peers as `name` (rpc/registry.h), now or after
  // start (see Note [Late registration]). Throws StatusError if `name` is taken.
  template <typename Fn>
  void Register(const std::string& name, Fn fn, AllowList allowed = {}) {
    registry_.Register(name, std::move(fn), std::move(allowed));
  }

  const WorkerInfo& self() const { return self_; }
  // Every rank's latest worker, by rank (it grows as workers join).
  std::vector<WorkerInfo> workers() const { return membership_.Table(); }
  // The worker named so; StatusError (NotFound) if the job has none.
  WorkerInfo GetWorkerInfo(const std::string& name) const;
  WorkerInfo GetWorkerInfo(int rank) const;
  // The same, nullopt if there is none.
  std::optional<WorkerInfo> FindWorker(const std::string& name) const;
  std::optional<WorkerInfo> FindWorker(int rank) const;
  // Who is in the job, and what happened to them (rpc/membership.h).
  Membership& membership() { return membership_; }
  const Membership& membership() const { return membership_; }

  // Untyped call: arguments and result as IValues.
  Future<c10::IValue> CallAsync(const std::string& to, const std::string& function,
                                std::vector<c10::IValue> args, const CallOptions& options = {});
  Future<c10::IValue> CallAsync(int to_rank, const std::string& function,
                                std::vector<c10::IValue> args, const CallOptions& options = {});

  // Typed calls, RpcSync/RpcAsync([options,] to, function, args...)
  // (rpc/typed_calls.h): arguments are converted with ValueTraits; the
  // result is checked against R (an error names what arrived instead).

  // The call's timeout: its own, or default_call_timeout when zero.
  absl::Duration EffectiveTimeout(const CallOptions& options) const {
    return OrDefault(options.timeout, options_.default_call_timeout);
  }

  // Sends a typed internal message (see Note [Typed internal services],
  // rpc/internal_service.h) and yields its Response; callbacks of the
  // returned future run on the pool.
  template <typename M>
  Future<ResultOf<typename M::Response>> CallService(int to_rank, M message,
                                                     const CallOptions& options = {}) {
    Future<c10::IValue> raw = Call(to_rank, M::kService, EncodeMessage(std::move(message)), options,
                                   nullptr, proto::INTERNAL_CALL, M::kCarriesUserValues);
    std::string to;
    if (!membership_.NameAndRole(to_rank, &to)) to = "rank " + std::to_string(to_rank);
    return Typed<typename M::Response>(std::move(raw), to, M::kService, pool());
  }
  // Untyped: for tests that send internal services malformed values.
  Future<c10::IValue> CallInternal(int to_rank, const std::string& service,
                                   std::vector<c10::IValue> args, const CallOptions& options = {});

  // Graceful (rpc.shutdown()): waits until every worker has called Shutdown
  // and no call is outstanding anywhere, then closes — bounded by
  // RpcOptions::shutdown_timeout (default 24 h), and while it waits, workers
  // that have not arrived are probed: one that died is reported by name at
  // once (see Note [Shutdown liveness]). Forced: fails every pending call now
  // and closes. A graceful shutdown that cannot agree closes anyway and
  // throws StatusError with the reason.
  void Shutdown(bool graceful = true);
  // The same, returning the reason instead of throwing.
  absl::Status TryShutdown(bool graceful = true);
  // Ends this worker's part in the job early, for good (see Note [Elastic
  // membership]): records it in the store, tells every live member (each
  // releases what this worker held there and records kLeft), then closes
  // without waiting for the others. Calls this worker still has in flight
  // fail. Throws StatusError if the store cannot record it.
  void Leave(const std::string& reason = "left");

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

  ThreadPool& executor() { return *pool(); }
  // The pool while it runs (and drains, at shutdown); null once it is gone:
  // for continuations that may fire after a shutdown (timers, late peers).
  ThreadPool* live_executor() const { return pool(); }
  // Once the job's graceful shutdown is agreed (or given up on): a peer's
  // call failing from then on says nothing about the peer.
  bool shutting_down() const { return shutting_down_.load(); }
  DeadlineTimer& timer() { return *timer_; }
  store::StoreClient& store() { return *store_client_; }
  const Registry& registry() const { return registry_; }
  Registry& registry() { return registry_; }
  const RpcOptions& options() const { return options_; }

 private:
  Runtime(RpcOptions options, Registry registry,
          std::vector<std::shared_ptr<RuntimeExtension>> extensions);
  absl::Status Start();
  // Start's steps: host the store if this rank does, and connect to it;
  // start the agent (taking a new incarnation when rejoining); meet the
  // other workers through the store.
  absl::Status ConnectStore();
  absl::Status StartAgent(const HostAddress& host);
  absl::Status MeetWorkers();
  friend class TypedCalls<Runtime>;
  template <typename R, typename... Args>
  Future<ResultOf<R>> StartTypedCall(const CallOptions& options, const std::string& to,
                                     const std::string& function, Args&&... args) const {
    std::vector<c10::IValue> values{ToIValue(std::forward<Args>(args))...};
    const std::optional<int> rank = membership_.RankOf(to);
    if (!rank.has_value()) return Future<ResultOf<R>>::Ready(NoWorkerNamed(to));
    return Typed<R>(Call(*rank, function, std::move(values), options, nullptr), to, function,
                    pool());
  }
  // Sends a call; the returned future's callbacks run on `executor`
  // (nullptr: inline on the completing thread — internal use only).
  Future<c10::IValue> Call(int to_rank, const std::string& function, std::vector<c10::IValue> args,
                           const CallOptions& options, Executor* executor,
                           proto::MessageKind kind = proto::CALL,
                           bool carries_user_values = true) const;
  void OnPeerFailure(int rank);
  // --- elastic membership (rpc/runtime_membership.cc) ---
  // Answers the join and leave announcements of other workers.
  void ServeMembership();
  // Tells every live member that this worker (re)joined.
  void AnnounceJoin();
  // A worker announced that `rank` (re)joined: admits what the store says
  // of it (an error for a rank never handed out or not published).
  absl::StatusOr<bool> AdmitAnnounced(int64_t rank);
  // A member's old incarnation is gone or it left: extensions release what
  // it held.
  void ReleasePeer(int rank);
  // Hands new membership events to subscribers, on the pool.
  void PostMembershipEvents();
  // The ranks a graceful shutdown waits for: those that have not left.
  std::vector<int> ShutdownParticipants();
  Future<Message> HandleRequest(int from_rank, Message request);
  // Dispatch, recorded when tracing or metrics are on (see Note [Call telemetry]).
  Future<Message> DispatchRecorded(int from_rank, const Message& request);
  // --- tracing and metrics (rpc/runtime_telemetry.cc) ---
  // Starts the trace file and metrics the options or environment ask for,
  // and serves the trace clock.
  absl::Status StartTelemetry();
  // Aligns this worker's trace clock to rank 0's (see Note [Trace clock alignment]).
  void AlignTraceClock();
  // `dispatch` on the pool (see Note [Deferred calls]); FailedPrecondition once
  // the pool is gone.
  Future<Message> DispatchOnPool(std::function<Future<Message>()> dispatch);
  // Records of a call served or made (see Note [Call telemetry]), when
  // CallTelemetryEnabled().
  std::shared_ptr<IncomingCall> RecordIncoming(int from_rank, const Message& request);
  std::shared_ptr<OutgoingCall> RecordOutgoing(int to_rank, Message* request) const;
  // The metrics summary line, when TESSERA_METRICS=1.
  void PrintMetrics() const;
  Future<Message> Dispatch(int from_rank, const Message& request, bool waited_for_registration);
  std::string DescribeWorker(int rank) const;
  static absl::Status NoWorkerNamed(const std::string& name);
  // A call for `target`, not registered yet: waits (see Note [Late registration]).
  Future<Message> AwaitRegistration(int from_rank, const Message& request);
  // --- graceful shutdown (rpc/runtime_shutdown.cc) ---
  // Answers other workers' liveness probes (see Note [Shutdown liveness],
  // rpc/shutdown_prober.h).
  void ServeLivenessProbes();

  template <typename R>
  static Future<ResultOf<R>> Typed(Future<c10::IValue> raw, const std::string& to,
                                   const std::string& function, Executor* executor) {
    if constexpr (std::is_same_v<R, c10::IValue>) {
      return raw.Then([](const absl::StatusOr<c10::IValue>& r) { return r; }, executor);
    } else {
      using Wire = ResultOf<R>;
      return raw.Then(
          [to, function](const absl::StatusOr<c10::IValue>& r) -> absl::StatusOr<Wire> {
            if (!r.ok()) return r.status();
            return FromIValueOr<Wire>(
                *r, "function '" + function + "' on worker '" + to + "' returned");
          },
          executor);
    }
  }

  const RpcOptions options_;
  Registry registry_;
  Registry internal_;  // filled by extensions in Create, then read-only
  const std::vector<std::shared_ptr<RuntimeExtension>> extensions_;
  ValueHooks* hooks_ = nullptr;       // from the extension that provides them
  CallObserver* observer_ = nullptr;  // likewise
  std::unique_ptr<store::StoreServer> store_server_;
  std::unique_ptr<store::StoreClient> store_client_;
  std::unique_ptr<DeadlineTimer> timer_;
  std::unique_ptr<ThreadPool> pool_;  // owner only: read the pool through pool()
  // pool_.get() from Start until the pool has drained in TryShutdown, then
  // null. Pool tasks (handlers, callbacks, membership events) post more work
  // while the drain runs. The pool object itself lives until the destructor,
  // after the timer's and the transport's threads are gone, so one that read
  // this just before it was cleared still posts to a live pool (its task is
  // dropped, unrun).
  std::atomic<ThreadPool*> live_pool_{nullptr};
  ThreadPool* pool() const { return live_pool_.load(std::memory_order_acquire); }
  std::unique_ptr<RpcAgent> agent_;
  WorkerInfo self_;  // the agent's, with role and incarnation
  Membership membership_;
  // Set when rendezvous completed (or failed). A peer that finished its own
  // rendezvous first may call us before that; such requests wait on this.
  Promise<bool> ready_;
  // Set once membership_ holds the rendezvous' table (or the start failed):
  // the one wait of a join announcement (see Note [Simultaneous rejoins]).
  Promise<bool> members_known_;
  Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
  // Serialises membership changes with the releases they imply.
  Mutex peer_changes_mu_;
  std::atomic<bool> shutting_down_{false};  // closing: no more peer-failure notices
  bool print_metrics_ = false;  // TESSERA_METRICS=1; set in Create
};

}  // namespace tessera::rpc
