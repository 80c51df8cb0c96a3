// How RRefs travel (rpc::ValueHooks): encoding makes a fork for the
// receiver, decoding turns a handle into a local reference and starts the
// fork's confirmation (see Note [RRef protocol]).
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "rref/rref_context.h"

namespace tessera::rref {

absl::Status RRefContext::EncodeRRef(const c10::IValue& value, int to_rank,
                                     proto::RRefHandle* out) {
  auto impl = c10::dynamic_intrusive_pointer_cast<RRefImpl>(value.toRRef());
  if (!impl || impl->context().get() != this) {
    return absl::InvalidArgumentError("an RRef from another runtime cannot be sent here");
  }
  const GlobalId fork_id = NextId();
  out->set_owner(impl->owner_rank());
  impl->rref_id().ToProto(out->mutable_rref_id());
  fork_id.ToProto(out->mutable_fork_id());
  out->set_parent(self_);
  out->set_type_name(impl->type_name());
  MutexLock lock(&mu_);
  if (impl->isOwner()) {
    // The owner makes the fork, so it knows of it already.
    auto it = owned_.find(impl->rref_id());
    if (it == owned_.end()) return absl::InternalError("owned RRef without an entry");
    it->second->forks[fork_id] = to_rank;
  } else {
    pending_children_[fork_id] = PendingChild{impl, to_rank};  // G2
  }
  return absl::OkStatus();
}

absl::StatusOr<c10::IValue> RRefContext::DecodeRRef(const proto::RRefHandle& handle,
                                                    int from_rank) {
  const GlobalId rref_id = GlobalId::FromProto(handle.rref_id());
  const GlobalId fork_id = GlobalId::FromProto(handle.fork_id());
  const int owner = handle.owner();
  const int parent = handle.parent();
  if (owner == self_) {
    std::vector<Promise<bool>> now_registered;
    {
      MutexLock lock(&mu_);
      // See Note [Early arrivals]: the creator may pass the reference back
      // before its creation message has been served here. The entry is made
      // now and the value arrives with the creation; waits on it are bounded
      // by their deadlines, and an entry nobody references is freed again.
      auto entry = EntryLocked(rref_id, handle.type_name(), &now_registered);
      // A fork the owner made for itself is not a user reference.
      if (parent == self_) entry->forks.erase(fork_id);
    }
    for (auto& promise : now_registered) promise.Set(true);
    auto handle_here = NewOwnerRRef(rref_id, handle.type_name());
    if (parent != self_) SendMessage(parent, ChildAcceptRequest{fork_id});
    return c10::IValue(c10::intrusive_ptr<c10::RRefInterface>(handle_here));
  }
  if (owner < 0 ||
      (runtime_.load() != nullptr && !runtime_.load()->FindWorker(owner).has_value())) {
    return absl::InvalidArgumentError(absl::StrCat("RRef names unknown owner rank ", owner));
  }
  const bool owner_made_it = parent == owner;
  auto user = NewUserRRef(rref_id, fork_id, owner, handle.type_name(), owner_made_it);
  if (!owner_made_it) {
    // Ask the owner to register this fork; then tell the parent (G2).
    rpc::Runtime* runtime = runtime_.load();
    if (runtime != nullptr) {
      std::weak_ptr<RRefContext> weak = weak_from_this();
      runtime->CallService(owner, ForkRequest{rref_id, fork_id})
          .OnReady([weak, fork_id, parent](const absl::StatusOr<bool>& ack) {
            auto self = weak.lock();
            if (self == nullptr) return;
            if (ack.ok()) {
              self->OnForkConfirmed(fork_id, parent);
              return;
            }
            TESSERA_LOG(INFO) << ForkRequest::kService << " failed: " << ack.status();
            self->OnForkFailed(fork_id, ack.status());
            self->SendMessage(parent, ChildAcceptRequest{fork_id});
          });
    }
  }
  (void)from_rank;
  return c10::IValue(c10::intrusive_ptr<c10::RRefInterface>(user));
}

}  // namespace tessera::rref
