// Owner side of the RRef protocol: the values a worker owns and the
// internal services other workers call on it (see Note [RRef protocol]).
#include "absl/strings/str_cat.h"
#include "rref/rref_context.h"

namespace tessera::rref {

// How long an early request waits for a value's creation when the request
// carries no deadline of its own (see Note [Early arrivals]).
constexpr absl::Duration kDefaultEarlyWait = absl::Seconds(60);

std::shared_ptr<RRefContext::OwnerEntry> RRefContext::EntryLocked(
    const GlobalId& rref_id, const std::string& type,
    std::vector<Promise<bool>>* now_registered) {
  auto& entry = owned_[rref_id];
  if (entry == nullptr) {
    entry = std::make_shared<OwnerEntry>();
    entry->type_name = type;
    owned_changed_.SignalAll();
    // See Note [Early arrivals]: requests that came before the value.
    auto early = awaiting_creation_.find(rref_id);
    if (early != awaiting_creation_.end()) {
      for (auto& [id, waiter] : early->second) now_registered->push_back(waiter);
      awaiting_creation_.erase(early);
    }
  }
  return entry;
}

std::shared_ptr<RRefContext::OwnerEntry> RRefContext::TakeIfUnreferencedLocked(
    const GlobalId& rref_id) {
  auto it = owned_.find(rref_id);
  if (it == owned_.end() || !it->second->forks.empty() || it->second->local_handles > 0) {
    return nullptr;
  }
  auto entry = std::move(it->second);
  owned_.erase(it);
  owned_changed_.SignalAll();
  return entry;
}

Future<OwnedValue> RRefContext::ValueOf(const GlobalId& rref_id) {
  MutexLock lock(&mu_);
  auto it = owned_.find(rref_id);
  if (it == owned_.end()) {
    return Future<OwnedValue>::Ready(absl::NotFoundError(absl::StrCat(
        "unknown RRef ", rref_id.ToString(), " on worker '", NameOf(self_),
        "' (never created here, or already freed)")));
  }
  return it->second->promise.GetFuture();
}

void RRefContext::Fulfil(const std::shared_ptr<OwnerEntry>& entry, Future<OwnedValue> value,
                         std::string what) {
  // The entry may be freed before the value is ready; the promise lives on
  // in this callback and the result is then simply dropped.
  Promise<OwnedValue> promise = entry->promise;
  value.OnReady([promise, what](const absl::StatusOr<OwnedValue>& result) {
    if (result.ok()) {
      promise.Set(result);
    } else {
      promise.Set(absl::Status(result.status().code(),
                               what + " failed: " + std::string(result.status().message())));
    }
  });
}

Future<OwnedValue> RRefContext::Later(std::function<Future<OwnedValue>()> produce,
                                      const CarriedState* carried_from) {
  rpc::Runtime* runtime = runtime_.load();
  ThreadPool* pool = runtime != nullptr ? runtime->live_executor() : nullptr;
  if (pool == nullptr) return produce();  // closed, or closing
  // The caller's autograd context (if any) goes along, as on this thread.
  Promise<OwnedValue> promise;
  pool->Post([promise, produce = std::move(produce),
              carried = carried_from != nullptr ? *carried_from : CarriedState(runtime)] {
    std::shared_ptr<void> scope = carried.Enter();
    produce().OnReady([promise](const absl::StatusOr<OwnedValue>& value) { promise.Set(value); });
  });
  return promise.GetFuture();
}

Future<OwnedValue> RRefContext::AfterRegistration(Future<bool> registered,
                                                  std::function<Future<OwnedValue>()> retry) {
  // See Note [Deferred calls] (rpc/runtime.h): on the pool, not in Register(),
  // in the autograd context of the thread that began the wait.
  return registered.Then(
      [self = shared_from_this(), retry = std::move(retry),
       carried = CarriedState(runtime_.load())](const absl::StatusOr<bool>&) mutable {
        return self->Later(std::move(retry), &carried);
      });
}

Future<OwnedValue> RRefContext::AsOwned(Future<c10::IValue> value) {
  return value.Then([](const absl::StatusOr<c10::IValue>& v) -> absl::StatusOr<OwnedValue> {
    if (!v.ok()) return v.status();
    return OwnedValue{*v};
  });
}

Future<OwnedValue> RRefContext::RunFunction(int caller, const std::string& function,
                                            std::vector<c10::IValue> args, bool waited) {
  rpc::Runtime* runtime = runtime_.load();
  if (runtime == nullptr) {
    return Future<OwnedValue>::Ready(absl::FailedPreconditionError("RRef runtime is closed"));
  }
  rpc::CallContext context;
  context.runtime = runtime;
  context.caller_rank = caller;
  context.caller_name = NameOf(caller);
  const rpc::RegisteredFunction* registered = runtime->registry().Find(function);
  if (registered == nullptr && !waited) {
    // See Note [Late registration]: wait for it, then try once more.
    return AfterRegistration(
        runtime->registry().WhenRegistered(
            function, absl::Now() + runtime->options().registration_wait, runtime->timer()),
        [self = shared_from_this(), caller, function, args = std::move(args)]() mutable {
          return self->RunFunction(caller, function, std::move(args), /*waited=*/true);
        });
  }
  if (registered != nullptr) {
    auto allowed = CheckAccess(caller, registered->allowed, "'" + function + "'");
    if (!allowed.ok()) return Future<OwnedValue>::Ready(allowed);
  }
  return AsOwned(rpc::Registry::Invoke(registered, function, context, std::move(args)));
}

absl::Status RRefContext::CheckAccess(int caller, const rpc::AllowList& allowed,
                                      const std::string& what) const {
  if (caller == self_ || allowed.empty()) return absl::OkStatus();
  rpc::Runtime* runtime = runtime_.load();
  std::string role;
  if (runtime != nullptr) {
    if (std::optional<rpc::WorkerInfo> worker = runtime->FindWorker(caller)) role = worker->role;
  }
  return allowed.Check(what, NameOf(caller), role);
}

Future<OwnedValue> RRefContext::Construct(int caller, const std::string& class_name,
                                          std::vector<c10::IValue> args, bool waited) {
  const ClassInfo* cls = classes_.Find(class_name);
  rpc::Runtime* runtime = runtime_.load();
  if (cls == nullptr && !waited && runtime != nullptr) {
    // See Note [Late registration]: wait for it, then try once more.
    return AfterRegistration(
        classes_.WhenRegistered(class_name, absl::Now() + runtime->options().registration_wait,
                                runtime->timer()),
        [self = shared_from_this(), caller, class_name, args = std::move(args)]() mutable {
          return self->Construct(caller, class_name, std::move(args), /*waited=*/true);
        });
  }
  if (cls == nullptr) {
    return Future<OwnedValue>::Ready(absl::NotFoundError(
        absl::StrCat("no class named '", class_name, "' is registered on worker '", NameOf(self_),
                     "' (waited for its registration up to the runtime's registration_wait)")));
  }
  // Before the constructor's arguments are converted to its C++ types.
  auto allowed = CheckAccess(caller, cls->allowed, "class '" + class_name + "'");
  if (!allowed.ok()) return Future<OwnedValue>::Ready(allowed);
  if (!cls->construct) {
    return Future<OwnedValue>::Ready(absl::FailedPreconditionError(
        "class '" + class_name + "' was registered without a constructor"));
  }
  auto object = cls->construct(args);
  if (!object.ok()) return Future<OwnedValue>::Ready(object.status());
  OwnedValue value;
  value.object = *std::move(object);
  value.cls = cls;
  return Future<OwnedValue>::Ready(std::move(value));
}

Future<c10::IValue> RRefContext::InvokeMethod(int caller, const GlobalId& target,
                                              const std::string& method,
                                              std::vector<c10::IValue> args) {
  rpc::Runtime* runtime = runtime_.load();
  const std::string caller_name = NameOf(caller);
  // The object may not exist yet (its construction runs later, on the
  // pool): the method then runs once it does, and must still run in the
  // caller's autograd context, as here. Without this, a method called on a
  // fresh object inside a context ran outside it, and the calls it made
  // went unrecorded — the first backward lost gradients.
  auto run = [this, runtime, caller, caller_name, method, carried = CarriedState(runtime),
              args = std::move(args)](
                 const absl::StatusOr<OwnedValue>& owned) mutable -> Future<c10::IValue> {
    if (!owned.ok()) return Future<c10::IValue>::Ready(owned.status());
    std::shared_ptr<void> scope = carried.Enter();
    if (owned->object == nullptr) {
      return Future<c10::IValue>::Ready(absl::FailedPreconditionError(
          "method '" + method + "' called on an RRef to a value; methods need an object "
          "of a registered class"));
    }
    auto allowed = CheckAccess(caller, owned->cls->allowed,
                               "method '" + method + "' of class '" + owned->cls->name + "'");
    if (!allowed.ok()) return Future<c10::IValue>::Ready(allowed);
    rpc::CallContext context;
    context.runtime = runtime;
    context.caller_rank = caller;
    context.caller_name = caller_name;
    context.self = owned->object.get();
    // The object stays alive until the method's future completes.
    auto keep_alive = owned->object;
    return owned->cls->methods.Invoke(method, context, std::move(args))
        .Then([keep_alive](const absl::StatusOr<c10::IValue>& r) { return r; });
  };
  Future<OwnedValue> value = ValueOf(target);
  if (value.IsReady()) return value.Then(std::move(run));
  // See Note [Deferred calls] (rpc/runtime.h): on the pool once the object is
  // made, not on the thread that made it, one waiting method after another.
  return value.Then([this, run = std::move(run)](const absl::StatusOr<OwnedValue>& owned) mutable {
    return OnPool<c10::IValue>([run = std::move(run), owned]() mutable { return run(owned); });
  });
}

Future<c10::IValue> RRefContext::FetchLocal(const GlobalId& rref_id) {
  const std::string self_name = NameOf(self_);
  return ValueOf(rref_id).Then(
      [self_name](const absl::StatusOr<OwnedValue>& owned) -> absl::StatusOr<c10::IValue> {
        if (!owned.ok()) return owned.status();
        if (owned->object != nullptr) {
          return absl::FailedPreconditionError(
              "to_here() on an RRef to a '" + owned->cls->name + "' object: objects stay on "
              "their owner ('" + self_name + "'); call its methods instead");
        }
        return owned->value;
      });
}

Future<bool> RRefContext::AwaitCreation(const GlobalId& rref_id, absl::Time deadline) {
  Promise<bool> created;
  uint64_t waiter = 0;
  {
    MutexLock lock(&mu_);
    if (owned_.count(rref_id) > 0) return Future<bool>::Ready(true);
    waiter = next_waiter_++;
    awaiting_creation_[rref_id][waiter] = created;
  }
  rpc::Runtime* runtime = runtime_.load();
  if (runtime != nullptr) {
    std::weak_ptr<RRefContext> weak = weak_from_this();
    const bool callers_deadline = deadline != absl::InfiniteFuture();
    const absl::Time when = callers_deadline ? deadline : absl::Now() + kDefaultEarlyWait;
    runtime->timer().Schedule(when, [weak, rref_id, waiter, callers_deadline]() {
      auto self = weak.lock();
      if (self == nullptr) return;
      Promise<bool> expired;
      {
        MutexLock lock(&self->mu_);
        auto it = self->awaiting_creation_.find(rref_id);
        if (it == self->awaiting_creation_.end()) return;
        auto entry = it->second.find(waiter);
        if (entry == it->second.end()) return;
        expired = entry->second;
        it->second.erase(entry);
        if (it->second.empty()) self->awaiting_creation_.erase(it);
      }
      // At the caller's deadline the caller gives up too, on its own timer;
      // whichever answer it sees first must be the same, so a loaded machine
      // (our answer arriving before its timer fires) changes nothing.
      if (callers_deadline) {
        expired.Set(absl::DeadlineExceededError(absl::StrCat(
            "RRef ", rref_id.ToString(),
            ": its creation had not arrived by the call's deadline (forged, freed, or late)")));
        return;
      }
      expired.Set(absl::NotFoundError(absl::StrCat(
          "unknown RRef ", rref_id.ToString(),
          ": its creation never arrived (forged, or already freed)")));
    });
  }
  return created.GetFuture();
}

Future<bool> RRefContext::RegisterFork(const GlobalId& rref_id, const GlobalId& fork_id,
                                       int holder, absl::Time deadline) {
  // Safe to register after creation rather than with it: the parent keeps
  // its own reference until this fork is confirmed (G2), so the value
  // cannot be freed in between.
  return AwaitCreation(rref_id, deadline)
      .Then([this, rref_id, fork_id, holder](const absl::StatusOr<bool>& created)
                -> absl::StatusOr<bool> {
        if (!created.ok()) return created.status();
        MutexLock lock(&mu_);
        auto it = owned_.find(rref_id);
        if (it == owned_.end()) {
          return absl::NotFoundError("fork of RRef " + rref_id.ToString() +
                                     ", which was already freed");
        }
        if (gone_ranks_.count(holder) > 0) {
          return absl::UnavailableError(absl::StrCat(
              "fork of RRef ", rref_id.ToString(), " for worker rank ", holder,
              ", which was reported gone: not registered"));
        }
        it->second->forks[fork_id] = holder;
        return true;
      });
}

void RRefContext::RegisterServices(rpc::Registry* internal) {
  ServeCreations(internal);
  ServeUses(internal);
}

void RRefContext::ServeCreations(rpc::Registry* internal) {
  // Registers the caller's fork of a new value and starts producing it.
  auto start = [this](const GlobalId& rref_id, const GlobalId& fork_id, int caller,
                      const std::string& type) {
    std::vector<Promise<bool>> now_registered;
    std::shared_ptr<OwnerEntry> entry;
    {
      MutexLock lock(&mu_);
      entry = EntryLocked(rref_id, type, &now_registered);
      if (gone_ranks_.count(caller) == 0) {
        entry->forks[fork_id] = caller;
      } else {
        // The creator died before this was served: still produced (its side
        // effects were asked for), but kept only while some fork of it is
        // known. `entry` keeps a dropped one alive past the lock.
        (void)TakeIfUnreferencedLocked(rref_id);
      }
    }
    for (auto& promise : now_registered) promise.Set(true);  // answers their requests
    return entry;
  };
  // A creation: the fork registered now (which acknowledges it), the value
  // produced later, on the pool.
  auto create = [this, start](const GlobalId& rref, const GlobalId& fork, int caller,
                              const std::string& type, std::function<Future<OwnedValue>()> produce,
                              const std::string& what) {
    Fulfil(start(rref, fork, caller, type), Later(std::move(produce)),
           "remote() of " + what + " on worker '" + NameOf(self_) + "'");
  };
  rpc::Serve<RemoteRequest>(*internal, [this, create](rpc::CallContext& ctx, RemoteRequest m) {
    const int caller = ctx.caller_rank;
    create(
        m.rref, m.fork, caller, m.type,
        [this, caller, m]() mutable { return RunFunction(caller, m.function, std::move(m.args)); },
        "'" + m.function + "'");
  });
  rpc::Serve<RemoteNewRequest>(*internal, [this, create](rpc::CallContext& ctx,
                                                         RemoteNewRequest m) {
    const int caller = ctx.caller_rank;
    create(
        m.rref, m.fork, caller, m.class_name,
        [this, caller, m]() mutable { return Construct(caller, m.class_name, std::move(m.args)); },
        "'" + m.class_name + "'");
  });
  rpc::Serve<RemoteMethodRequest>(
      *internal, [this, create](rpc::CallContext& ctx, RemoteMethodRequest m) {
        const int caller = ctx.caller_rank;
        create(
            m.rref, m.fork, caller, m.type,
            [this, caller, m]() mutable {
              return AsOwned(InvokeMethod(caller, m.target, m.method, std::move(m.args)));
            },
            "method '" + m.method + "'");
      });
}

void RRefContext::ServeUses(rpc::Registry* internal) {
  rpc::Serve<CallRequest>(*internal, [this](rpc::CallContext& ctx, CallRequest m) {
    const int caller = ctx.caller_rank;
    if (!m.may_be_early) return InvokeMethod(caller, m.rref, m.method, std::move(m.args));
    // Early: the method runs once the creation arrives, on the pool (see Note
    // [Deferred calls]), in this call's autograd context (see InvokeMethod).
    return AwaitCreation(m.rref, ctx.deadline)
        .Then([this, caller, carried = CarriedState(ctx.runtime), m = std::move(m)](
                  const absl::StatusOr<bool>& created) mutable -> Future<c10::IValue> {
          if (!created.ok()) return Future<c10::IValue>::Ready(created.status());
          return OnPool<c10::IValue>([this, caller, carried, m = std::move(m)]() mutable {
            std::shared_ptr<void> scope = carried.Enter();
            return InvokeMethod(caller, m.rref, m.method, std::move(m.args));
          });
        });
  });
  rpc::Serve<FetchRequest>(*internal, [this](rpc::CallContext& ctx, FetchRequest m) {
    if (!m.may_be_early) return FetchLocal(m.rref);
    return AwaitCreation(m.rref, ctx.deadline)
        .Then([this, id = m.rref](const absl::StatusOr<bool>& created) -> Future<c10::IValue> {
          if (!created.ok()) return Future<c10::IValue>::Ready(created.status());
          return FetchLocal(id);
        });
  });
  rpc::Serve<ForkRequest>(*internal, [this](rpc::CallContext& ctx, ForkRequest m) {
    return RegisterFork(m.rref, m.fork, ctx.caller_rank, ctx.deadline);
  });
  rpc::Serve<ChildAcceptRequest>(*internal, [this](rpc::CallContext&, ChildAcceptRequest m) {
    PendingChild released;  // dropping the parent may send a delete: after the lock
    MutexLock lock(&mu_);
    auto it = pending_children_.find(m.fork);
    if (it != pending_children_.end()) {
      released = std::move(it->second);
      pending_children_.erase(it);
    }
  });
  rpc::Serve<DeleteRequest>(*internal, [this](rpc::CallContext&, DeleteRequest m) {
    std::shared_ptr<OwnerEntry> doomed;
    {
      MutexLock lock(&mu_);
      auto it = owned_.find(m.rref);
      if (it == owned_.end() || it->second->forks.erase(m.fork) == 0) {
        return absl::NotFoundError(absl::StrCat("delete of unknown fork ", m.fork.ToString(),
                                                " of RRef ", m.rref.ToString()));
      }
      doomed = TakeIfUnreferencedLocked(m.rref);
    }
    return absl::OkStatus();
  });
}

}  // namespace tessera::rref
