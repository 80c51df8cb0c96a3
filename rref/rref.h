// RRef<T>: a reference to a value or object of type T that lives on one
// worker (its owner) — the C++ counterpart of torch.distributed.rpc.RRef.
//
//   RRef<at::Tensor> t = worker->Remote<at::Tensor>("worker1", "make_tensor", 3);
//   at::Tensor copy = t.to_here();                 // fetches a copy
//   RRef<ParameterServer> ps = worker->RemoteObject<ParameterServer>("ps", 10);
//   at::Tensor w = ps.RpcSync<at::Tensor>("get_weights");
//
// Copies of an RRef share one reference; when the last copy anywhere in the
// job is gone, the owner frees the value (see Note [RRef protocol]). RRefs may
// be passed as arguments and results of RPCs and of other RRef calls.
// Blocking calls throw StatusError; the *Async variants return futures
// that carry the status instead (README, "Errors"). Every call has the
// runtime's default deadline (RpcOptions::default_call_timeout) unless it
// is given its own CallOptions — first in RpcSync/RpcAsync, last in
// to_here; an absl::Duration converts to it (see Note [One timeout convention],
// rpc/call_options.h).
//
// Thread-safety: an RRef may be copied and used from any thread.
#pragma once

#include <string>
#include <utility>

#include "common/await_call.h"
#include "common/status.h"
#include "rpc/call_options.h"
#include "rpc/runtime.h"
#include "rpc/typed_calls.h"
#include "rpc/value_traits.h"
#include "rref/rref_context.h"

namespace tessera::rref {

template <typename T>
class RRef : public rpc::TypedCalls<RRef<T>> {
 public:
  RRef() = default;
  explicit RRef(c10::intrusive_ptr<RRefImpl> impl) : impl_(std::move(impl)) {}

  bool valid() const { return static_cast<bool>(impl_); }
  int owner() const { return impl_->owner_rank(); }
  std::string owner_name() const { return impl_->ownerName(); }
  bool is_owner() const { return impl_->isOwner(); }
  bool confirmed_by_owner() const { return impl_->confirmedByOwner(); }

  // A copy of the value (for tensors, a copy of the data). Objects of
  // registered classes never leave their owner: for RRef<SomeClass> this
  // does not compile, and to_here_value_async() returns an error saying so.
  // `options.timeout` zero (or a Duration of zero): the runtime's default.
  Future<T> to_here_async(const rpc::CallOptions& options = {}) const {
    static_assert(rpc::IsWireType<T>::value,
                  "to_here(): objects of registered classes never leave their owner; "
                  "call their methods (RpcSync/RpcAsync) instead");
    return Typed<T>(Held(impl_->context()->Fetch(*impl_, options.timeout)));
  }
  // Untyped fetch, for code that does not know T.
  Future<c10::IValue> to_here_value_async(const rpc::CallOptions& options = {}) const {
    return Held(impl_->context()->Fetch(*impl_, options.timeout));
  }
  T to_here(const rpc::CallOptions& options = {}) const {
    return ValueOrThrow(AwaitCall(to_here_async(options), EffectiveTimeout(options)));
  }

  // The value itself; only on the owner (StatusError, FailedPrecondition,
  // elsewhere). For objects of registered classes, use local_object().
  T local_value() const {
    c10::IValue value = ValueOrThrow(impl_->context()->LocalValue(*impl_));
    return ValueOrThrow(rpc::FromIValueOr<T>(value, "RRef holds"));
  }
  // The object itself, on its owner.
  std::shared_ptr<T> local_object() const {
    return std::static_pointer_cast<T>(ValueOrThrow(impl_->context()->LocalObject(*impl_)));
  }

  // Calls a method of the remote object (see ClassRegistry):
  // RpcSync/RpcAsync([options,] method, args...), rpc/typed_calls.h.

  // Calls a method of the remote object and keeps the result on the owner.
  template <typename R, typename... Args>
  RRef<R> Remote(const std::string& method, Args&&... args) const {
    auto result = ValueOrThrow(impl_->context()->RemoteMethod(
        *impl_, method, {rpc::ToIValue(std::forward<Args>(args))...}, ""));
    result->Confirmed().OnReady([held = impl_](const absl::StatusOr<bool>&) {});
    return RRef<R>(std::move(result));
  }

  const c10::intrusive_ptr<RRefImpl>& impl() const { return impl_; }

 private:
  // Note [Calls hold their RRef]: this reference lives until the owner has
  // answered `call`. Its release travels as a separate message that the
  // owner may serve first; dropping the last handle right after starting a
  // call (as a pipeline stage does with its input) would otherwise free the
  // value the call is about to use.
  template <typename F>
  F Held(F call) const {
    call.OnReady([held = impl_](const auto&) {});
    return call;
  }

  friend class rpc::TypedCalls<RRef<T>>;
  template <typename R, typename... Args>
  Future<rpc::ResultOf<R>> StartTypedCall(const rpc::CallOptions& options,
                                          const std::string& method, Args&&... args) const {
    return Typed<R>(Held(impl_->context()->CallMethod(
        *impl_, method, {rpc::ToIValue(std::forward<Args>(args))...}, options.timeout)));
  }
  absl::Duration EffectiveTimeout(const rpc::CallOptions& options) const {
    return impl_->context()->EffectiveTimeout(options.timeout);
  }

  template <typename R>
  static Future<rpc::ResultOf<R>> Typed(Future<c10::IValue> raw) {
    using Wire = rpc::ResultOf<R>;
    return raw.Then([](const absl::StatusOr<c10::IValue>& r) -> absl::StatusOr<Wire> {
      if (!r.ok()) return r.status();
      return rpc::FromIValueOr<Wire>(*r, "RRef call returned");
    });
  }

  c10::intrusive_ptr<RRefImpl> impl_;
};

}  // namespace tessera::rref

namespace tessera::rpc {

// RRefs travel as arguments and results of typed functions.
template <typename T>
struct ValueTraits<rref::RRef<T>> {
  static std::string Name() { return "RRef"; }
  static c10::IValue ToIValue(rref::RRef<T> v) {
    return c10::IValue(c10::intrusive_ptr<c10::RRefInterface>(v.impl()));
  }
  static std::optional<rref::RRef<T>> FromIValue(const c10::IValue& v) {
    if (!v.isRRef()) return std::nullopt;
    auto impl = c10::dynamic_intrusive_pointer_cast<rref::RRefImpl>(v.toRRef());
    if (!impl) return std::nullopt;
    return rref::RRef<T>(std::move(impl));
  }
};

}  // namespace tessera::rpc
