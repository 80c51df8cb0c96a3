// TypedCalls: the one RpcSync/RpcAsync overload set, shared by
// rpc::Runtime, tessera::Worker and rref::RRef (see Note [One timeout
// convention], rpc/call_options.h).
//
//   runtime->RpcSync<at::Tensor>("worker1", "add", x, y);
//   runtime->RpcSync<at::Tensor>(absl::Seconds(5), "worker1", "add", x, y);
//   ps.RpcAsync<void>(CallOptions{timeout}, "update", grads);   // an RRef
//
// A class derives from TypedCalls<Itself> and provides, privately with
// `friend class rpc::TypedCalls<Itself>;`:
//   template <typename R, typename... Args>
//   Future<ResultOf<R>> StartTypedCall(const CallOptions&, Args&&...) const;
//       — sends the call (Args: the target, e.g. worker and function, then
//         the values), never throws: failures travel in the future;
//   absl::Duration EffectiveTimeout(const CallOptions&) const;
//       — the call's timeout with the default resolved.
// RpcSync waits with AwaitCall and throws StatusError (README, "Errors").
#pragma once

#include <ATen/core/ivalue.h>

#include <type_traits>
#include <utility>
#include <variant>

#include "common/await_call.h"
#include "common/future.h"
#include "common/status.h"
#include "rpc/call_options.h"

namespace tessera::rpc {

// What a typed call of R yields: `void` calls yield std::monostate.
template <typename R>
using ResultOf = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

template <typename Derived>
class TypedCalls {
 public:
  template <typename R = c10::IValue, typename... Args>
  Future<ResultOf<R>> RpcAsync(const CallOptions& options, Args&&... args) const {
    return self().template StartTypedCall<R>(options, std::forward<Args>(args)...);
  }
  template <typename R = c10::IValue, typename First, typename... Args,
            std::enable_if_t<!kIsCallOptions<First>, int> = 0>
  Future<ResultOf<R>> RpcAsync(First&& target, Args&&... args) const {
    return RpcAsync<R>(CallOptions{}, std::forward<First>(target), std::forward<Args>(args)...);
  }

  template <typename R = c10::IValue, typename... Args>
  R RpcSync(const CallOptions& options, Args&&... args) const {
    auto result = AwaitCall(RpcAsync<R>(options, std::forward<Args>(args)...),
                            self().EffectiveTimeout(options));
    if constexpr (std::is_void_v<R>) {
      ThrowIfError(result.status());
    } else {
      return ValueOrThrow(std::move(result));
    }
  }
  template <typename R = c10::IValue, typename First, typename... Args,
            std::enable_if_t<!kIsCallOptions<First>, int> = 0>
  R RpcSync(First&& target, Args&&... args) const {
    return RpcSync<R>(CallOptions{}, std::forward<First>(target), std::forward<Args>(args)...);
  }

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }
};

}  // namespace tessera::rpc
