// User side of the RRef protocol, the codec hooks, and the lifecycle.
// The owner side's services are in rref_services.cc.
#include "rref/rref_context.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status.h"
#include "common/timeouts.h"

namespace tessera::rref {

// How long local_value() waits for a value still being computed.
constexpr absl::Duration kLocalValueTimeout = absl::Seconds(60);

std::shared_ptr<RRefContext> RRefContext::Create(ClassRegistry classes) {
  return std::shared_ptr<RRefContext>(new RRefContext(std::move(classes)));
}

RRefContext::RRefContext(ClassRegistry classes) : classes_(std::move(classes)) {}

absl::Duration RRefContext::EffectiveTimeout(const rpc::CallOptions& options) const {
  rpc::Runtime* runtime = runtime_.load();
  return runtime != nullptr ? runtime->EffectiveTimeout(options)
                            : OrDefault(options.timeout, DefaultTimeout());
}

void RRefContext::Attach(rpc::Runtime* runtime, rpc::Registry* internal) {
  runtime_ = runtime;
  self_ = runtime->options().rank;
  RegisterServices(internal);
}

GlobalId RRefContext::NextId() {
  // A rank restarted alone must not reuse ids its old incarnation gave out
  // (peers may still hold some): the incarnation goes in the high bits.
  rpc::Runtime* runtime = runtime_.load();
  const int64_t incarnation = runtime == nullptr ? 0 : runtime->self().incarnation;
  return GlobalId{self_, (incarnation << 40) | next_local_.fetch_add(1)};
}

std::string RRefContext::NameOf(int rank) const {
  rpc::Runtime* runtime = runtime_.load();
  if (runtime != nullptr) {
    if (std::optional<rpc::WorkerInfo> worker = runtime->FindWorker(rank)) return worker->name;
  }
  return "rank " + std::to_string(rank);
}

absl::StatusOr<int> RRefContext::RankOf(const std::string& worker) const {
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) return absl::FailedPreconditionError("RRef runtime is closed");
  const std::optional<rpc::WorkerInfo> info = runtime->FindWorker(worker);
  if (!info.has_value()) return absl::NotFoundError("no worker named '" + worker + "'");
  return info->rank;
}

c10::intrusive_ptr<RRefImpl> RRefContext::NewUserRRef(const GlobalId& rref_id,
                                                      const GlobalId& fork_id, int owner,
                                                      const std::string& type,
                                                      bool confirmed) {
  auto state = std::make_shared<ForkState>();
  if (confirmed) {
    state->confirmed = true;
    state->confirmation.Set(true);
  }
  {
    MutexLock lock(&mu_);
    user_forks_[fork_id] = UserFork{rref_id, owner, state};
  }
  return c10::make_intrusive<RRefImpl>(shared_from_this(), rref_id, fork_id, owner,
                                       NameOf(owner), type, state);
}

c10::intrusive_ptr<RRefImpl> RRefContext::NewOwnerRRef(const GlobalId& rref_id,
                                                       const std::string& type) {
  std::vector<Promise<bool>> now_registered;
  {
    MutexLock lock(&mu_);
    EntryLocked(rref_id, type, &now_registered)->local_handles++;
  }
  for (auto& promise : now_registered) promise.Set(true);
  return c10::make_intrusive<RRefImpl>(shared_from_this(), rref_id, self_, NameOf(self_),
                                       type);
}

c10::intrusive_ptr<RRefImpl> RRefContext::KeepLocally(const GlobalId& rref_id,
                                                       const std::string& type,
                                                       Future<OwnedValue> value,
                                                       std::string what) {
  auto handle = NewOwnerRRef(rref_id, type);
  std::shared_ptr<OwnerEntry> entry;
  {
    MutexLock lock(&mu_);
    entry = owned_[rref_id];
  }
  Fulfil(entry, std::move(value), std::move(what));
  return handle;
}

c10::intrusive_ptr<RRefImpl> RRefContext::Own(c10::IValue value) {
  return KeepLocally(NextId(), "", Future<OwnedValue>::Ready(OwnedValue{std::move(value)}),
                     "RRef of a local value");
}

void RRefContext::LogIfFailed(const char* service, int to_rank, const absl::Status& status) {
  if (!status.ok()) TESSERA_LOG(INFO) << service << " to rank " << to_rank << " failed: " << status;
}

absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RRefContext::RemoteCall(
    const std::string& owner, const std::string& function, std::vector<c10::IValue> args,
    const std::string& type_name) {
  return StartRemote(
      owner, type_name,
      [&](int owner_rank, const GlobalId& rref, const GlobalId& fork) {
        ConfirmWhenAcked(owner_rank,
                         RemoteRequest{rref, fork, function, type_name, std::move(args)}, fork);
      },
      [&] { return RunFunction(self_, function, std::move(args)); },
      "remote() of '" + function + "'");
}

absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RRefContext::RemoteNew(
    const std::string& owner, const std::string& class_name, std::vector<c10::IValue> args) {
  return StartRemote(
      owner, class_name,
      [&](int owner_rank, const GlobalId& rref, const GlobalId& fork) {
        ConfirmWhenAcked(owner_rank, RemoteNewRequest{rref, fork, class_name, std::move(args)},
                         fork);
      },
      [&] { return Construct(self_, class_name, std::move(args)); },
      "remote() of '" + class_name + "'");
}

absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RRefContext::StartRemote(
    const std::string& owner, const std::string& type,
    const std::function<void(int, const GlobalId&, const GlobalId&)>& send_to_owner,
    const std::function<Future<OwnedValue>()>& produce_here, std::string what) {
  TESSERA_ASSIGN_OR_RETURN(auto owner_rank, RankOf(owner));
  const GlobalId rref_id = NextId();
  if (owner_rank == self_) return KeepLocally(rref_id, type, produce_here(), std::move(what));
  const GlobalId fork_id = NextId();
  auto handle = NewUserRRef(rref_id, fork_id, owner_rank, type, false);
  send_to_owner(owner_rank, rref_id, fork_id);
  return handle;
}

absl::StatusOr<c10::intrusive_ptr<RRefImpl>> RRefContext::RemoteMethod(
    const RRefImpl& target, const std::string& method, std::vector<c10::IValue> args,
    const std::string& type_name) {
  const int owner = target.owner_rank();
  const GlobalId rref_id = NextId();
  if (owner == self_) {
    return KeepLocally(rref_id, type_name,
                       AsOwned(InvokeMethod(self_, target.rref_id(), method, std::move(args))),
                       "remote() of method '" + method + "'");
  }
  const GlobalId fork_id = NextId();
  auto handle = NewUserRRef(rref_id, fork_id, owner, type_name, false);
  RemoteMethodRequest message{target.rref_id(), rref_id,   fork_id,
                              method,           type_name, std::move(args)};
  // The target must be known to its owner before a method of it can run.
  // A send from the confirming thread carries what one from here would (the
  // caller's autograd context): without it, the first remote() on a fresh
  // RRef inside a context went unrecorded and its backward never came.
  std::weak_ptr<RRefContext> weak = weak_from_this();
  target.Confirmed().OnReady(
      [weak, owner, message, fork_id,
       carried = CarriedState(runtime_.load())](const absl::StatusOr<bool>& ok) {
        auto self = weak.lock();
        if (self == nullptr) return;
        if (!ok.ok()) {
          self->OnForkFailed(fork_id, ok.status());
          return;
        }
        std::shared_ptr<void> scope = carried.Enter();
        self->ConfirmWhenAcked(owner, message, fork_id);
      });
  return handle;
}

void RRefContext::OnCreationAck(const GlobalId& fork_id, const absl::Status& ack,
                                const char* service) {
  if (ack.ok()) {
    OnForkConfirmed(fork_id, /*parent_rank=*/-1);
  } else {
    TESSERA_LOG(INFO) << service << " failed: " << ack;
    OnForkFailed(fork_id, ack);
  }
}

void RRefContext::OnForkConfirmed(const GlobalId& fork_id, int parent_rank) {
  bool send_delete = false;
  UserFork fork;
  {
    MutexLock lock(&mu_);
    auto it = user_forks_.find(fork_id);
    if (it != user_forks_.end()) {
      it->second.state->confirmed.store(true);
      fork = it->second;
      if (it->second.dropped) {
        send_delete = true;  // G1: the handle died before the owner knew of it
        user_forks_.erase(it);
      }
    }
  }
  // Outside the lock: waiting calls send from the confirmation's callbacks,
  // and encoding their RRefs takes the lock (it deadlocked here when a
  // pipeline's remote() chains waited on forks being confirmed).
  if (fork.state != nullptr) fork.state->confirmation.Set(true);
  if (send_delete) SendMessage(fork.owner, DeleteRequest{fork.rref_id, fork_id});
  if (parent_rank >= 0) SendMessage(parent_rank, ChildAcceptRequest{fork_id});
}

void RRefContext::OnForkFailed(const GlobalId& fork_id, const absl::Status& why) {
  UserFork fork;
  {
    MutexLock lock(&mu_);
    auto it = user_forks_.find(fork_id);
    if (it == user_forks_.end()) return;
    fork = it->second;
    user_forks_.erase(it);  // the owner never knew of it: nothing to delete
  }
  fork.state->confirmation.Set(why);  // outside the lock, as in OnForkConfirmed
}

Future<c10::IValue> RRefContext::WhenConfirmed(const RRefImpl& rref,
                                               std::function<Future<c10::IValue>()> send) {
  Future<bool> confirmed = rref.Confirmed();
  if (confirmed.IsReady()) {
    auto status = confirmed.Wait(absl::ZeroDuration());
    if (!status.ok()) return Future<c10::IValue>::Ready(status.status());
    return send();
  }
  // The send happens on the confirming thread: it carries what a send from
  // here would (the caller's autograd context), or the call goes unrecorded.
  return confirmed.Then([send = std::move(send), carried = CarriedState(runtime_.load())](
                            const absl::StatusOr<bool>& ok) -> Future<c10::IValue> {
    if (!ok.ok()) return Future<c10::IValue>::Ready(ok.status());
    std::shared_ptr<void> scope = carried.Enter();
    return send();
  });
}

void RRefContext::ReleaseUserFork(const GlobalId& rref_id, const GlobalId& fork_id,
                                  int owner) {
  {
    MutexLock lock(&mu_);
    auto it = user_forks_.find(fork_id);
    if (it == user_forks_.end()) return;  // purged, or released at shutdown
    if (!it->second.state->confirmed.load()) {
      it->second.dropped = true;  // delete once confirmed (G1)
      return;
    }
    const bool released = it->second.released;
    user_forks_.erase(it);
    if (released || closed_) return;
  }
  SendMessage(owner, DeleteRequest{rref_id, fork_id});
}

void RRefContext::ReleaseOwnerHandle(const GlobalId& rref_id) {
  std::shared_ptr<OwnerEntry> doomed;
  {
    MutexLock lock(&mu_);
    auto it = owned_.find(rref_id);
    if (it == owned_.end()) return;
    it->second->local_handles--;
    doomed = TakeIfUnreferencedLocked(rref_id);
  }
  // `doomed` (and the value it holds) dies here, outside the lock.
}

Future<c10::IValue> RRefContext::Fetch(const RRefImpl& rref, absl::Duration timeout) {
  if (rref.owner_rank() == self_) return FetchLocal(rref.rref_id());
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) {
    return Future<c10::IValue>::Ready(absl::FailedPreconditionError("RRef runtime is closed"));
  }
  const int owner = rref.owner_rank();
  if (IsCreatorFork(rref) && !rref.Confirmed().IsReady()) {
    // See Note [Early arrivals]: the owner waits for the creation if need be.
    return runtime->CallService(owner, FetchRequest{rref.rref_id(), /*may_be_early=*/true},
                                rpc::CallOptions{timeout});
  }
  FetchRequest fetch{rref.rref_id(), /*may_be_early=*/false};
  return WhenConfirmed(rref, [runtime, owner, fetch, timeout]() {
    return runtime->CallService(owner, fetch, rpc::CallOptions{timeout});
  });
}

Future<c10::IValue> RRefContext::CallMethod(const RRefImpl& target, const std::string& method,
                                            std::vector<c10::IValue> args,
                                            absl::Duration timeout) {
  if (target.owner_rank() == self_) {
    return InvokeMethod(self_, target.rref_id(), method, std::move(args));
  }
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) {
    return Future<c10::IValue>::Ready(absl::FailedPreconditionError("RRef runtime is closed"));
  }
  const bool early = IsCreatorFork(target) && !target.Confirmed().IsReady();
  CallRequest call{target.rref_id(), early, method, std::move(args)};
  const int owner = target.owner_rank();
  if (early) {  // See Note [Early arrivals]
    return runtime->CallService(owner, std::move(call), rpc::CallOptions{timeout});
  }
  return WhenConfirmed(target, [runtime, owner, call, timeout]() {
    return runtime->CallService(owner, call, rpc::CallOptions{timeout});
  });
}

absl::StatusOr<c10::IValue> RRefContext::LocalValue(const RRefImpl& rref) {
  if (!rref.isOwner()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local_value() called on worker '", NameOf(self_), "' but the RRef is owned by '",
        rref.ownerName(), "'"));
  }
  return FetchLocal(rref.rref_id()).Wait(kLocalValueTimeout);
}

absl::StatusOr<std::shared_ptr<void>> RRefContext::LocalObject(const RRefImpl& rref) {
  if (!rref.isOwner()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "local_value() called on worker '", NameOf(self_), "' but the RRef is owned by '",
        rref.ownerName(), "'"));
  }
  TESSERA_ASSIGN_OR_RETURN(auto value, ValueOf(rref.rref_id()).Wait(kLocalValueTimeout));
  if (value.object == nullptr) {
    return absl::FailedPreconditionError("the RRef holds a value, not an object");
  }
  return value.object;
}

RRefContext::Stats RRefContext::stats() const {
  MutexLock lock(&mu_);
  Stats stats;
  stats.owned_values = owned_.size();
  for (const auto& [id, entry] : owned_) stats.known_forks += entry->forks.size();
  stats.user_forks = user_forks_.size();
  stats.pending_children = pending_children_.size();
  return stats;
}

bool RRefContext::WaitForOwnedValues(size_t count, absl::Duration timeout) const {
  MutexLock lock(&mu_);
  return owned_changed_.WaitUntil(
      &mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return owned_.size() == count; },
      absl::Now() + timeout);
}

void RRefContext::OnPeerRejoined(int rank) {
  MutexLock lock(&mu_);
  gone_ranks_.erase(rank);
}

void RRefContext::OnPeerUnavailable(int rank) {
  std::vector<std::shared_ptr<OwnerEntry>> doomed;
  std::vector<PendingChild> released;
  {
    MutexLock lock(&mu_);
    gone_ranks_.insert(rank);
    std::vector<GlobalId> ids;
    for (auto& [id, entry] : owned_) {
      for (auto it = entry->forks.begin(); it != entry->forks.end();) {
        it = it->second == rank ? entry->forks.erase(it) : std::next(it);
      }
      ids.push_back(id);
    }
    for (const auto& id : ids) {
      if (auto entry = TakeIfUnreferencedLocked(id)) doomed.push_back(std::move(entry));
    }
    for (auto it = pending_children_.begin(); it != pending_children_.end();) {
      if (it->second.child_rank == rank) {
        released.push_back(std::move(it->second));
        it = pending_children_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = user_forks_.begin(); it != user_forks_.end();) {
      it = it->second.owner == rank ? user_forks_.erase(it) : std::next(it);
    }
  }
  if (!doomed.empty() || !released.empty()) {
    TESSERA_LOG(INFO) << "worker rank " << rank << " is gone: freed " << doomed.size()
                      << " values it referenced, released " << released.size()
                      << " forks passed to it";
  }
}

void RRefContext::ReleaseReferences() {
  std::vector<std::pair<int, DeleteRequest>> deletes;
  {
    MutexLock lock(&mu_);
    for (auto& [fork_id, fork] : user_forks_) {
      if (fork.released) continue;
      if (!fork.state->confirmed.load()) {
        fork.dropped = true;
        continue;
      }
      fork.released = true;
      deletes.emplace_back(fork.owner, DeleteRequest{fork.rref_id, fork_id});
    }
  }
  for (auto& [owner, message] : deletes) SendMessage(owner, message);
}

absl::Status RRefContext::CheckReleased() {
  std::map<GlobalId, std::shared_ptr<OwnerEntry>> owned;
  std::map<GlobalId, PendingChild> children;
  std::vector<std::string> leaks;
  {
    MutexLock lock(&mu_);
    for (const auto& [id, entry] : owned_) {
      for (const auto& [fork, holder] : entry->forks) {
        if (leaks.size() < 5) {
          leaks.push_back(absl::StrCat("RRef ", id.ToString(), " fork ", fork.ToString(),
                                       " held by ", NameOf(holder)));
        }
      }
    }
    owned.swap(owned_);
    children.swap(pending_children_);
    owned_changed_.SignalAll();
  }
  if (leaks.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "RRefs still referenced by other workers at shutdown: " + absl::StrJoin(leaks, "; "));
}

void RRefContext::OnClosed() {
  {
    MutexLock lock(&mu_);
    closed_ = true;
  }
  runtime_ = nullptr;
}

}  // namespace tessera::rref
