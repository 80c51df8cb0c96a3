#include "rref/rref_impl.h"

#include "rref/rref_context.h"

namespace tessera::rref {

RRefImpl::RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id,
                   GlobalId fork_id, int owner, std::string owner_name,
                   std::string type_name, std::shared_ptr<ForkState> state)
    : context_(std::move(context)),
      rref_id_(rref_id),
      fork_id_(fork_id),
      owner_(owner),
      owner_name_(std::move(owner_name)),
      type_name_(std::move(type_name)),
      is_owner_(false),
      state_(std::move(state)) {}

RRefImpl::RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id, int owner,
                   std::string owner_name, std::string type_name)
    : context_(std::move(context)),
      rref_id_(rref_id),
      owner_(owner),
      owner_name_(std::move(owner_name)),
      type_name_(std::move(type_name)),
      is_owner_(true),
      state_(std::make_shared<ForkState>()) {
  state_->confirmed = true;
  state_->confirmation.Set(true);
}

RRefImpl::~RRefImpl() {
  if (is_owner_) {
    context_->ReleaseOwnerHandle(rref_id_);
  } else {
    context_->ReleaseUserFork(rref_id_, fork_id_, owner_);
  }
}

}  // namespace tessera::rref
