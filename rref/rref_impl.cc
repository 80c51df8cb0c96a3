#include "rref/rref_impl.h"

#include "rref/rref_context.h"

namespace tessera::rref {

RRefImpl::RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id,
                   GlobalId fork_id, int owner, std::string owner_name,
                   std::string type_name, std::shared_ptr<std::atomic<bool>> confirmed)
    : context_(std::move(context)),
      rref_id_(rref_id),
      fork_id_(fork_id),
      owner_(owner),
      owner_name_(std::move(owner_name)),
      type_name_(std::move(type_name)),
      is_owner_(false),
      confirmed_(std::move(confirmed)) {}

RRefImpl::RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id, int owner,
                   std::string owner_name, std::string type_name)
    : context_(std::move(context)),
      rref_id_(rref_id),
      owner_(owner),
      owner_name_(std::move(owner_name)),
      type_name_(std::move(type_name)),
      is_owner_(true),
      confirmed_(std::make_shared<std::atomic<bool>>(true)) {}

RRefImpl::~RRefImpl() {
  if (is_owner_) {
    context_->ReleaseOwnerHandle(rref_id_);
  } else {
    context_->ReleaseUserFork(rref_id_, fork_id_, owner_);
  }
}

}  // namespace tessera::rref
