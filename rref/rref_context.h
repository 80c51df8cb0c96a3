// RRefContext: one worker's side of the RRef protocol. Attach it to a
// runtime (tessera::Worker does; or rpc::Init(options, registry, {context}));
// RRef<T>, Remote() and RemoteObject() (rref.h, remote.h) are the
// user-facing API on top.
//
// Note [RRef protocol] (after PyTorch's RRef design note):
// - The owner keeps each value with the set of forks (user references)
//   that it knows of, and who holds each. A value is freed when it has no
//   forks and no local handles left — while the job runs.
// - remote(): the caller makes the rref id and its own fork id, returns a
//   handle at once, and sends "rref.remote". The owner registers the fork,
//   acknowledges (that confirms the caller's fork), and computes the value.
// - Passing a user reference to another worker makes a child fork. G2: the
//   parent keeps its own reference (pending_children_) until the child says
//   the owner knows of it ("rref.child_accept"). The child asks the owner
//   ("rref.fork") before that. Passing the owner's reference registers the
//   fork at once (the owner is the one who knows).
// - G1: a fork is never deleted before the owner knows of it: a handle
//   dropped before its confirmation sends "rref.delete" only when the
//   confirmation arrives.
// - A dead peer's forks and pending children are dropped when the runtime
//   reports it unavailable, and it stays gone: a fork or creation it sent
//   before dying but that is served after the report (handlers run
//   concurrently) registers no fork for it, so it cannot pin a value.
//   Ids that the owner does not know are errors.
//
// Thread-safety: thread-safe.
#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/future.h"
#include "common/mutex.h"
#include "rpc/call_options.h"
#include "rpc/runtime.h"
#include "rpc/runtime_extension.h"
#include "rref/class_registry.h"
#include "rref/global_id.h"
#include "rref/rref_impl.h"
#include "rref/rref_messages.h"

namespace tessera::rref {

// A value held by its owner: plain (an IValue) or an object of a class.
struct OwnedValue {
  c10::IValue value;
  std::shared_ptr<void> object;
  const ClassInfo* cls = nullptr;
};

class RRefContext final : public rpc::RuntimeExtension,
                          public rpc::ValueHooks,
                          public std::enable_shared_from_this<RRefContext> {
 public:
  static std::shared_ptr<RRefContext> Create(ClassRegistry classes = {});

  // --- creating values on a worker (the caller gets a user reference) ---
  // Runs registered function `function` on `owner` and keeps its result there.
  absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RemoteCall(
      const std::string& owner, const std::string& function,
      std::vector<c10::IValue> args, const std::string& type_name);
  // Constructs an object of registered class `class_name` on `owner`.
  absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RemoteNew(
      const std::string& owner, const std::string& class_name,
      std::vector<c10::IValue> args);
  // Calls `method` on the object behind `target` and keeps the result there.
  absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RemoteMethod(
      const RRefImpl& target, const std::string& method, std::vector<c10::IValue> args,
      const std::string& type_name);

  // A reference to `value`, owned by this worker — torch's RRef(value).
  c10::intrusive_ptr<RRefImpl> Own(c10::IValue value);

  // --- using a reference ---
  Future<c10::IValue> CallMethod(const RRefImpl& target, const std::string& method,
                                 std::vector<c10::IValue> args, absl::Duration timeout);
  Future<c10::IValue> Fetch(const RRefImpl& rref, absl::Duration timeout);
  // The owner's value itself; FailedPrecondition anywhere but on the owner.
  absl::StatusOr<c10::IValue> LocalValue(const RRefImpl& rref);
  // The owner's object itself (for local use on the owner).
  absl::StatusOr<std::shared_ptr<void>> LocalObject(const RRefImpl& rref);

  ClassRegistry& classes() { return classes_; }
  const ClassRegistry& classes() const { return classes_; }
  rpc::Runtime* runtime() const { return runtime_.load(); }
  // The call's timeout, or the runtime's default call timeout when zero.
  absl::Duration EffectiveTimeout(const rpc::CallOptions& options) const;

  // For leak checks in tests and at shutdown.
  struct Stats {
    size_t owned_values = 0;     // values this worker owns
    size_t known_forks = 0;      // user references to them that it knows of
    size_t user_forks = 0;       // user references this worker holds, alive
    size_t pending_children = 0; // forks it passed on, not yet confirmed (G2)
  };
  Stats stats() const;
  // Waits until this worker owns exactly `count` values (deletes arrive
  // asynchronously); false if that did not happen within `timeout`.
  bool WaitForOwnedValues(size_t count, absl::Duration timeout) const;

  // --- called by RRefImpl's destructor ---
  void ReleaseOwnerHandle(const GlobalId& rref_id);
  void ReleaseUserFork(const GlobalId& rref_id, const GlobalId& fork_id, int owner);

  // --- rpc::RuntimeExtension ---
  void Attach(rpc::Runtime* runtime, rpc::Registry* internal) override;
  rpc::ValueHooks* value_hooks() override { return this; }
  void OnPeerUnavailable(int rank) override;
  void OnPeerRejoined(int rank) override;
  void ReleaseReferences() override;
  absl::Status CheckReleased() override;
  void OnClosed() override;

  // --- rpc::ValueHooks ---
  absl::Status EncodeRRef(const c10::IValue& rref, int to_rank,
                          proto::RRefHandle* out) override;
  absl::StatusOr<c10::IValue> DecodeRRef(const proto::RRefHandle& handle,
                                         int from_rank) override;

 private:
  struct OwnerEntry {
    Promise<OwnedValue> promise;
    std::map<GlobalId, int> forks;  // fork -> worker holding it
    int local_handles = 0;
    std::string type_name;
  };
  struct UserFork {
    GlobalId rref_id;
    int owner = -1;
    std::shared_ptr<ForkState> state;
    bool dropped = false;   // the handle died before confirmation (G1)
    bool released = false;  // a delete was sent (at shutdown, or on drop)
  };
  struct PendingChild {
    c10::intrusive_ptr<RRefImpl> parent;  // kept alive until confirmed (G2)
    int child_rank = -1;
  };

  explicit RRefContext(ClassRegistry classes);

  GlobalId NextId();
  std::string NameOf(int rank) const;
  absl::StatusOr<int> RankOf(const std::string& worker) const;
  // Owner side: the entry for `rref_id`, made if absent. Requires mu_.
  // Forks that were waiting for it are registered; their requests' promises
  // go to `now_registered`, for the caller to complete after unlocking.
  std::shared_ptr<OwnerEntry> EntryLocked(const GlobalId& rref_id, const std::string& type,
                                          std::vector<Promise<bool>>* now_registered)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Owner side: removes and returns an entry nobody references any more
  // (nullptr otherwise); the caller lets it die after releasing mu_, since
  // destroying a value may run user code.
  std::shared_ptr<OwnerEntry> TakeIfUnreferencedLocked(const GlobalId& rref_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // remote() of a value of `type` on `owner`: kept here, from
  // `produce_here`, when that is this worker; else a user reference whose
  // value `send_to_owner`(owner rank, rref id, fork id) asks the owner for.
  absl::StatusOr<c10::intrusive_ptr<RRefImpl>> StartRemote(
      const std::string& owner, const std::string& type,
      const std::function<void(int, const GlobalId&, const GlobalId&)>& send_to_owner,
      const std::function<Future<OwnedValue>()>& produce_here, std::string what);
  // Sends a creation message to the owner; its acknowledgement confirms
  // `fork_id`.
  template <typename M>
  void ConfirmWhenAcked(int owner, M message, const GlobalId& fork_id) {
    rpc::Runtime* runtime = runtime_.load();
    if (runtime == nullptr) return;
    std::weak_ptr<RRefContext> weak = weak_from_this();
    runtime->CallService(owner, std::move(message))
        .OnReady([weak, fork_id](const absl::StatusOr<std::monostate>& ack) {
          if (auto self = weak.lock()) self->OnCreationAck(fork_id, ack.status(), M::kService);
        });
  }
  void OnCreationAck(const GlobalId& fork_id, const absl::Status& ack, const char* service);
  Future<OwnedValue> ValueOf(const GlobalId& rref_id);
  c10::intrusive_ptr<RRefImpl> NewUserRRef(const GlobalId& rref_id, const GlobalId& fork_id,
                                           int owner, const std::string& type, bool confirmed);
  c10::intrusive_ptr<RRefImpl> NewOwnerRRef(const GlobalId& rref_id, const std::string& type);
  // Fire-and-forget protocol message; failures are logged (peer gone).
  template <typename M>
  void SendMessage(int to_rank, M message) {
    rpc::Runtime* runtime = runtime_.load();
    if (runtime == nullptr) return;
    runtime->CallService(to_rank, std::move(message))
        .OnReady([to_rank](const absl::StatusOr<std::monostate>& result) {
          LogIfFailed(M::kService, to_rank, result.status());
        });
  }
  static void LogIfFailed(const char* service, int to_rank, const absl::Status& status);
  void OnForkConfirmed(const GlobalId& fork_id, int parent_rank);
  // The owner never registered `fork_id` (its request failed): calls through
  // it fail with `why`, and no delete will be sent.
  void OnForkFailed(const GlobalId& fork_id, const absl::Status& why);
  // Runs `send` once `rref` is confirmed by its owner (at once if it is).
  Future<c10::IValue> WhenConfirmed(const RRefImpl& rref,
                                    std::function<Future<c10::IValue>()> send);
  // Owner side: completes when `rref_id` exists here — at once, or when its
  // creation arrives; DeadlineExceeded if that has not happened by
  // `deadline`, NotFound if it has none and the default wait passes.
  Future<bool> AwaitCreation(const GlobalId& rref_id, absl::Time deadline);
  // Owner side, in the fork service: register once the value exists.
  Future<bool> RegisterFork(const GlobalId& rref_id, const GlobalId& fork_id, int holder,
                            absl::Time deadline);
  // True for the reference remote() returned to its caller: the only one
  // whose requests may reach the owner before the creation does.
  bool IsCreatorFork(const RRefImpl& rref) const {
    return !rref.isOwner() && rref.rref_id().worker == self_ && rref.fork_id().worker == self_;
  }
  void RegisterServices(rpc::Registry* internal);
  // remote(): the requests that create a value (rref_services.cc).
  void ServeCreations(rpc::Registry* internal);
  // Calls, fetches, forks and deletes of existing values.
  void ServeUses(rpc::Registry* internal);
  // Owner side: `entry`'s value is whatever `value` completes with;
  // `what` describes the producer for error messages.
  static void Fulfil(const std::shared_ptr<OwnerEntry>& entry, Future<OwnedValue> value,
                     std::string what);
  // Owner side: produce values (run a function, construct an object, call a
  // method of another owned object).
  // A name not registered yet is waited for (see Note [Late registration]),
  // unless `waited` says that was done.
  Future<OwnedValue> RunFunction(int caller, const std::string& function,
                                 std::vector<c10::IValue> args, bool waited = false);
  Future<OwnedValue> Construct(int caller, const std::string& class_name,
                               std::vector<c10::IValue> args, bool waited = false);
  // PermissionDenied unless `caller` (this worker always is) is on `allowed`.
  absl::Status CheckAccess(int caller, const rpc::AllowList& allowed,
                           const std::string& what) const;
  static Future<OwnedValue> AsOwned(Future<c10::IValue> value);
  // What a continuation must carry from the thread that set it up to the
  // one that runs it later (the caller's distributed autograd context):
  // captured when made, current on the running thread while Enter()'s
  // result lives. Every deferred send or method here goes through it.
  class CarriedState {
   public:
    explicit CarriedState(rpc::Runtime* runtime)
        : enter_(runtime != nullptr ? runtime->CaptureThreadState() : nullptr) {}
    std::shared_ptr<void> Enter() const { return enter_ ? enter_() : nullptr; }

   private:
    std::function<std::shared_ptr<void>()> enter_;
  };
  // `fn` (returning Future<T>) on the pool, or here once the runtime has
  // closed: for work that waited (see Note [Deferred calls], rpc/runtime.h).
  template <typename T, typename Fn>
  Future<T> OnPool(Fn fn) {
    rpc::Runtime* runtime = runtime_.load();
    ThreadPool* pool = runtime != nullptr ? runtime->live_executor() : nullptr;
    if (pool == nullptr) return fn();
    return RunOn<T>(*pool, std::move(fn));
  }
  // `retry` once a late registration's wait ends (see Note [Late registration]),
  // through Later().
  Future<OwnedValue> AfterRegistration(Future<bool> registered,
                                       std::function<Future<OwnedValue>()> retry);
  // Owner side: `produce` run on the pool, not on the serving thread — a
  // creation is acknowledged once its fork is registered, not when a slow
  // function or constructor returns (else a creation slower than the call's
  // deadline would fail on the caller while the owner keeps its fork).
  // `carried_from`: the state to run in, when not this thread's (a wait
  // captured it where it began).
  Future<OwnedValue> Later(std::function<Future<OwnedValue>()> produce,
                           const CarriedState* carried_from = nullptr);
  // remote() whose owner is this worker: the owner's handle, with the value
  // to come from `value`.
  c10::intrusive_ptr<RRefImpl> KeepLocally(const GlobalId& rref_id, const std::string& type,
                                           Future<OwnedValue> value, std::string what);
  Future<c10::IValue> InvokeMethod(int caller, const GlobalId& target, const std::string& method,
                                   std::vector<c10::IValue> args);
  Future<c10::IValue> FetchLocal(const GlobalId& rref_id);

  ClassRegistry classes_;  // thread-safe; classes may be added while running
  // Set by Attach; cleared by OnClosed. RRef handles that outlive the
  // runtime then release locally only.
  std::atomic<rpc::Runtime*> runtime_{nullptr};
  int self_ = -1;
  std::atomic<int64_t> next_local_{1};

  mutable Mutex mu_;
  mutable CondVar owned_changed_;  // signalled when owned_ gains or loses an entry
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::map<GlobalId, std::shared_ptr<OwnerEntry>> owned_ ABSL_GUARDED_BY(mu_);
  std::map<GlobalId, UserFork> user_forks_ ABSL_GUARDED_BY(mu_);
  std::map<GlobalId, PendingChild> pending_children_ ABSL_GUARDED_BY(mu_);
  // Ranks reported unavailable (OnPeerUnavailable), until a new
  // incarnation rejoins (OnPeerRejoined).
  std::set<int> gone_ranks_ ABSL_GUARDED_BY(mu_);
  // Note [Early arrivals]: a request about a value can reach its owner
  // before the value's creation does — a child's fork request (it comes
  // from another worker than the creation), or the creator's own first call
  // (sent without waiting for the creation's acknowledgement, to save a
  // round trip; the owner serves requests concurrently, so even one pipe
  // does not order them). Such requests wait here until the creation
  // arrives, or fail at their deadline: DeadlineExceeded at the caller's own
  // (what the caller's timer says too), NotFound after kDefaultEarlyWait.
  // Only requests that say they may be early wait; others fail at once.
  std::map<GlobalId, std::map<uint64_t, Promise<bool>>> awaiting_creation_
      ABSL_GUARDED_BY(mu_);
  uint64_t next_waiter_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace tessera::rref
