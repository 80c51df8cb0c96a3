// remote(): create a value or an object on another worker and get an RRef
// to it at once, while the owner computes it.
//
//   auto t  = Remote<at::Tensor>(worker->rrefs(), "worker1", "make_tensor", 3);
//   auto ps = RemoteObject<ParameterServer>(worker->rrefs(), "worker1", int64_t{10});
// (tessera::Worker has both as members: worker->Remote<at::Tensor>(...).)
//
// Errors of the function or constructor surface on to_here() and on every
// method call through the RRef. An unknown worker throws StatusError here.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "rref/rref.h"

namespace tessera::rref {

template <typename R, typename... Args>
RRef<R> Remote(RRefContext& context, const std::string& owner, const std::string& function,
               Args&&... args) {
  return RRef<R>(ValueOrThrow(context.RemoteCall(
      owner, function, {rpc::ToIValue(std::forward<Args>(args))...}, "")));
}

// A reference to `value`, owned by this worker (to pass to others).
template <typename T>
RRef<T> MakeRRef(RRefContext& context, T value) {
  static_assert(rpc::IsWireType<T>::value, "MakeRRef takes a value, not an object");
  return RRef<T>(context.Own(rpc::ToIValue(std::move(value))));
}

// From inside a registered function or method: RRefs owned by this worker to
// each of `values` (e.g. a model's parameters, for a DistributedOptimizer).
// Throws StatusError if this worker's runtime has no RRefContext.
inline std::vector<RRef<at::Tensor>> MakeRRefs(rpc::CallContext& ctx,
                                               const std::vector<at::Tensor>& values) {
  auto* context = ctx.runtime->FindExtension<RRefContext>();
  if (context == nullptr) {
    throw StatusError(absl::FailedPreconditionError(
        "worker '" + ctx.runtime->self().name + "' runs without RRefs"));
  }
  std::vector<RRef<at::Tensor>> rrefs;
  for (const auto& value : values) rrefs.push_back(MakeRRef(*context, value));
  return rrefs;
}

template <typename C, typename... Args>
RRef<C> RemoteObject(RRefContext& context, const std::string& owner, Args&&... args) {
  const std::string name = context.classes().template NameOf<C>();
  if (name.empty()) {
    throw StatusError(absl::InvalidArgumentError(
        std::string("RemoteObject: class ") + typeid(C).name() + " is not registered"));
  }
  return RRef<C>(ValueOrThrow(
      context.RemoteNew(owner, name, {rpc::ToIValue(std::forward<Args>(args))...})));
}

}  // namespace tessera::rref
