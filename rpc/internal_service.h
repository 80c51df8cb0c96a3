// Typed internal services: the messages the runtime's extensions (RRefs,
// distributed autograd) and the runtime itself send each other.
//
// Note [Typed internal services]: each service is one struct, the request:
//
//   struct FetchRequest {
//     static constexpr const char* kService = services::kRRefFetch;
//     static constexpr bool kCarriesUserValues = true;  // recorded by dist autograd
//     using Response = c10::IValue;
//     int32_t rref_worker = 0;
//     int64_t rref_local = 0;
//     bool may_be_early = false;
//     auto Fields() { return std::tie(rref_worker, rref_local, may_be_early); }
//   };
//
// Its fields are listed once, in Fields(); one codec turns them into the
// envelope's positional values and back, checking each type (a malformed
// message is an InvalidArgument error naming the service, never a crash).
// The sender (CallService) and the server (Serve) both take the struct, so
// a field added, removed or retyped on one side and not the other, or a
// handler answering with another type than Response, is a compile error.
// kCarriesUserValues says whether the message carries user values (remote
// calls, fetches) — distributed autograd records those and not the
// reference-counting traffic; it travels with the request in memory
// (Message::carries_user_values), never on the wire.
#pragma once

#include <ATen/core/ivalue.h>

#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/future.h"
#include "rpc/call_context.h"
#include "rpc/function_adapter.h"
#include "rpc/registry.h"
#include "rpc/service_names.h"
#include "rpc/value_traits.h"

namespace tessera::rpc {

namespace service_internal {

// What a handler's return type answers: T for T, StatusOr<T>, Future<T>;
// void for void, Status and Future<std::monostate> (None on the wire).
template <typename R>
struct Answer {
  using Type = R;
};
template <>
struct Answer<absl::Status> {
  using Type = void;
};
template <typename T>
struct Answer<absl::StatusOr<T>> {
  using Type = T;
};
template <typename T>
struct Answer<Future<T>> {
  using Type = T;
};
template <>
struct Answer<Future<std::monostate>> {
  using Type = void;
};

// Binds a handler of M to a callable with M's fields as parameters, which
// the registry's adapter checks and converts like any registered function.
template <typename M, typename FieldRefs>
struct FieldsAdapter;
template <typename M, typename... T>
struct FieldsAdapter<M, std::tuple<T&...>> {
  template <typename Handler>
  static auto Bind(Handler handler) {
    return [handler = std::move(handler)](CallContext& context, T... fields) {
      M message;
      message.Fields() = std::forward_as_tuple(std::move(fields)...);
      return handler(context, std::move(message));
    };
  }
};

template <typename M>
using FieldRefs = decltype(std::declval<M&>().Fields());

template <typename M>
void CheckMessage() {
  static_assert(std::is_convertible_v<decltype(M::kService), const char*>,
                "an internal message names its service: static constexpr const char* kService");
  static_assert(std::is_same_v<std::decay_t<decltype(M::kCarriesUserValues)>, bool>,
                "an internal message says whether dist autograd records it: "
                "static constexpr bool kCarriesUserValues");
}

}  // namespace service_internal

// The request's fields as the envelope's positional values.
template <typename M>
std::vector<c10::IValue> EncodeMessage(M message) {
  service_internal::CheckMessage<M>();
  return std::apply([](auto&... field) { return std::vector<c10::IValue>{ToIValue(field)...}; },
                    message.Fields());
}

// Registers `handler(CallContext&, M) -> Response` (or StatusOr/Future of
// it, or Status/void for a void Response) as M's service in `internal`.
template <typename M, typename Handler>
void Serve(Registry& internal, Handler handler) {
  service_internal::CheckMessage<M>();
  using Returned = std::invoke_result_t<Handler, CallContext&, M>;
  static_assert(
      std::is_same_v<typename service_internal::Answer<Returned>::Type, typename M::Response>,
      "the handler answers another type than the message's Response");
  internal.Register(
      M::kService,
      service_internal::FieldsAdapter<M, service_internal::FieldRefs<M>>::Bind(std::move(handler)));
}

}  // namespace tessera::rpc
