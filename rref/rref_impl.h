// RRefImpl: the object behind every RRef handle in a process, shared by all
// copies of the handle (c10::intrusive_ptr, so it can also ride in an
// IValue). When the last copy dies, it tells its RRefContext, which frees
// the value (owner) or sends the owner a delete for this fork (user).
//
// Thread-safety: immutable but for the confirmation flag (atomic).
#pragma once

#include <ATen/core/jit_type.h>
#include <ATen/core/rref_interface.h>

#include <atomic>
#include <memory>
#include <string>

#include "common/future.h"
#include "rref/global_id.h"

namespace tessera::rref {

// Whether the owner knows of a user fork yet. Requests through the fork
// (fetch, method calls) wait for `confirmation`, so that they never reach
// the owner before the value's creation does.
struct ForkState {
  std::atomic<bool> confirmed{false};
  Promise<bool> confirmation;
};

class RRefContext;

class RRefImpl final : public c10::RRefInterface {
 public:
  // A user reference: fork `fork_id` of value `rref_id` owned by `owner`.
  RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id, GlobalId fork_id,
           int owner, std::string owner_name, std::string type_name,
           std::shared_ptr<ForkState> state);
  // The owner's own reference to a value it holds.
  RRefImpl(std::shared_ptr<RRefContext> context, GlobalId rref_id, int owner,
           std::string owner_name, std::string type_name);
  ~RRefImpl() override;

  c10::worker_id_t owner() const override { return static_cast<c10::worker_id_t>(owner_); }
  std::string ownerName() const override { return owner_name_; }
  bool isOwner() const override { return is_owner_; }
  bool confirmedByOwner() const override { return is_owner_ || state_->confirmed.load(); }
  // Completes once the owner knows of this reference (at once for owners).
  Future<bool> Confirmed() const { return state_->confirmation.GetFuture(); }
  const c10::TypePtr type() const override { return c10::AnyType::get(); }

  int owner_rank() const { return owner_; }
  const GlobalId& rref_id() const { return rref_id_; }
  const GlobalId& fork_id() const { return fork_id_; }
  const std::string& type_name() const { return type_name_; }
  const std::shared_ptr<RRefContext>& context() const { return context_; }

 private:
  const std::shared_ptr<RRefContext> context_;
  const GlobalId rref_id_;
  const GlobalId fork_id_;  // unset for the owner's reference
  const int owner_;
  const std::string owner_name_;
  const std::string type_name_;
  const bool is_owner_;
  const std::shared_ptr<ForkState> state_;
};

}  // namespace tessera::rref
