// Turns a typed C++ callable into an ErasedFunction over IValues.
//
// Internal to the registry (see registry.h for the user-facing contract).
#pragma once

#include <ATen/core/ivalue.h>

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "common/future.h"
#include "common/status.h"
#include "rpc/call_context.h"
#include "rpc/codec.h"
#include "rpc/value_traits.h"

namespace tessera::rpc {

using ErasedFunction =
    std::function<Future<c10::IValue>(CallContext&, std::vector<c10::IValue>&)>;

namespace adapter_internal {

template <typename F>
struct FunctionTraits : FunctionTraits<decltype(&F::operator())> {};
template <typename R, typename... A>
struct FunctionTraits<R (*)(A...)> {
  using Return = R;
  using Params = std::tuple<A...>;
};
template <typename R, typename... A>
struct FunctionTraits<R(A...)> : FunctionTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...) const> : FunctionTraits<R (*)(A...)> {};
template <typename C, typename R, typename... A>
struct FunctionTraits<R (C::*)(A...)> : FunctionTraits<R (*)(A...)> {};

// Splits off a leading CallContext& parameter.
template <typename Tuple>
struct WireParams {
  static constexpr bool kTakesContext = false;
  using Types = Tuple;
};
template <typename... Rest>
struct WireParams<std::tuple<CallContext&, Rest...>> {
  static constexpr bool kTakesContext = true;
  using Types = std::tuple<Rest...>;
};

// What a return type means on the wire.
template <typename R>
struct ReturnTraits {
  using Value = R;
  static std::string Name() { return ValueTraits<R>::Name(); }
};
template <>
struct ReturnTraits<void> {
  static std::string Name() { return "None"; }
};
template <>
struct ReturnTraits<absl::Status> {
  static std::string Name() { return "None"; }
};
template <typename T>
struct ReturnTraits<absl::StatusOr<T>> {
  static std::string Name() { return ValueTraits<T>::Name(); }
};
template <typename T>
struct ReturnTraits<Future<T>> {
  static std::string Name() { return ValueTraits<T>::Name(); }
};

template <typename Tuple, size_t... I>
std::vector<std::string> ParamNames(std::index_sequence<I...>) {
  return {ValueTraits<std::decay_t<std::tuple_element_t<I, Tuple>>>::Name()...};
}

// A tuple of std::optional<Param>; nullopt where an argument has the wrong type.
template <typename Params, size_t... I>
auto ConvertArgs(const std::vector<c10::IValue>& args, std::index_sequence<I...>) {
  return std::make_tuple(
      ValueTraits<std::decay_t<std::tuple_element_t<I, Params>>>::FromIValue(
          args[I])...);
}

template <typename T>
absl::StatusOr<c10::IValue> ToWire(absl::StatusOr<T> result) {
  if (!result.ok()) return result.status();
  return ValueTraits<T>::ToIValue(*std::move(result));
}

// Calls `fn` and wraps whatever it returns into a Future<IValue>.
template <typename R, typename Call>
Future<c10::IValue> CallAndWrap(Call&& call) {
  if constexpr (std::is_void_v<R>) {
    call();
    return Future<c10::IValue>::Ready(c10::IValue());
  } else if constexpr (std::is_same_v<R, absl::Status>) {
    absl::Status status = call();
    if (!status.ok()) return Future<c10::IValue>::Ready(status);
    return Future<c10::IValue>::Ready(c10::IValue());
  } else if constexpr (future_internal::IsStatusOr<R>::value) {
    return Future<c10::IValue>::Ready(ToWire(call()));
  } else if constexpr (future_internal::IsFuture<R>::value) {
    using T = typename R::ValueType;
    return call().Then([](const absl::StatusOr<T>& r) { return ToWire(r); });
  } else {
    return Future<c10::IValue>::Ready(ValueTraits<R>::ToIValue(call()));
  }
}

}  // namespace adapter_internal

// "(Tensor, int) -> Tensor" for a callable's wire-visible signature.
template <typename Fn>
std::string Signature() {
  using namespace adapter_internal;
  using Traits = FunctionTraits<std::decay_t<Fn>>;
  using Params = typename WireParams<typename Traits::Params>::Types;
  auto names = ParamNames<Params>(std::make_index_sequence<std::tuple_size_v<Params>>());
  return "(" + absl::StrJoin(names, ", ") + ") -> " +
         ReturnTraits<typename Traits::Return>::Name();
}

template <typename Fn>
ErasedFunction Erase(const std::string& name, Fn fn) {
  using namespace adapter_internal;
  using Traits = FunctionTraits<std::decay_t<Fn>>;
  using Wire = WireParams<typename Traits::Params>;
  using Params = typename Wire::Types;
  using R = typename Traits::Return;
  const std::string signature = Signature<Fn>();

  return [fn = std::move(fn), name, signature](
             CallContext& context,
             std::vector<c10::IValue>& args) -> Future<c10::IValue> {
    constexpr size_t kArity = std::tuple_size_v<Params>;
    auto mismatch = [&]() {
      std::vector<std::string> got;
      for (const auto& arg : args) got.push_back(DescribeIValue(arg));
      return Future<c10::IValue>::Ready(absl::InvalidArgumentError(
          "function '" + name + "' expects " + signature + " but got (" +
          absl::StrJoin(got, ", ") + ")"));
    };
    if (args.size() != kArity) return mismatch();
    // Convert every argument; any failure is reported before `fn` runs.
    auto converted =
        ConvertArgs<Params>(args, std::make_index_sequence<kArity>());
    const bool all_ok = std::apply(
        [](const auto&... c) { return (true && ... && c.has_value()); }, converted);
    if (!all_ok) return mismatch();
    try {
      return CallAndWrap<R>([&]() -> R {
        return std::apply(
            [&](auto&... c) -> R {
              if constexpr (Wire::kTakesContext) {
                return fn(context, std::move(*c)...);
              } else {
                return fn(std::move(*c)...);
              }
            },
            converted);
      });
    } catch (const StatusError& e) {
      // A Tessera call inside the function failed (an RpcSync, say): its
      // code stands — a permission refused two hops away is still
      // PERMISSION_DENIED to the first caller.
      return Future<c10::IValue>::Ready(Annotate(e.status(), "function '" + name + "' raised"));
    } catch (const std::exception& e) {
      return Future<c10::IValue>::Ready(absl::UnknownError(
          "function '" + name + "' raised: " + std::string(e.what())));
    }
  };
}

}  // namespace tessera::rpc
