// ValueTraits<T>: how a C++ type maps to a wire value (c10::IValue).
//
// Supported: c10::IValue (Any), at::Tensor, int64_t (and other integers),
// double (accepts int, as Python does), bool, std::string, std::vector<T>,
// std::map/unordered_map<std::string, T>, std::optional<T>, and None
// (std::monostate; `void` returns map to None). Each trait gives the type's
// name for signatures, ToIValue, and a checked FromIValue that returns
// std::nullopt on a mismatch.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::rpc {

template <typename T, typename Enable = void>
struct ValueTraits;

template <>
struct ValueTraits<c10::IValue> {
  static std::string Name() { return "Any"; }
  static c10::IValue ToIValue(c10::IValue v) { return v; }
  static std::optional<c10::IValue> FromIValue(const c10::IValue& v) { return v; }
};

template <>
struct ValueTraits<std::monostate> {
  static std::string Name() { return "None"; }
  static c10::IValue ToIValue(std::monostate) { return c10::IValue(); }
  static std::optional<std::monostate> FromIValue(const c10::IValue& v) {
    if (!v.isNone()) return std::nullopt;
    return std::monostate{};
  }
};

template <>
struct ValueTraits<at::Tensor> {
  static std::string Name() { return "Tensor"; }
  static c10::IValue ToIValue(at::Tensor v) { return c10::IValue(std::move(v)); }
  static std::optional<at::Tensor> FromIValue(const c10::IValue& v) {
    if (!v.isTensor()) return std::nullopt;
    return v.toTensor();
  }
};

template <>
struct ValueTraits<bool> {
  static std::string Name() { return "bool"; }
  static c10::IValue ToIValue(bool v) { return c10::IValue(v); }
  static std::optional<bool> FromIValue(const c10::IValue& v) {
    if (!v.isBool()) return std::nullopt;
    return v.toBool();
  }
};

template <typename T>
struct ValueTraits<T, std::enable_if_t<std::is_integral_v<T> &&
                                       !std::is_same_v<T, bool>>> {
  static std::string Name() { return "int"; }
  static c10::IValue ToIValue(T v) { return c10::IValue(static_cast<int64_t>(v)); }
  static std::optional<T> FromIValue(const c10::IValue& v) {
    if (!v.isInt()) return std::nullopt;
    const int64_t i = v.toInt();
    const bool below = i < static_cast<int64_t>(std::numeric_limits<T>::min());
    const bool above =
        i > 0 && static_cast<uint64_t>(i) >
                     static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (below || above) return std::nullopt;
    return static_cast<T>(i);
  }
};

template <typename T>
struct ValueTraits<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string Name() { return "float"; }
  static c10::IValue ToIValue(T v) { return c10::IValue(static_cast<double>(v)); }
  static std::optional<T> FromIValue(const c10::IValue& v) {
    if (v.isDouble()) return static_cast<T>(v.toDouble());
    if (v.isInt()) return static_cast<T>(v.toInt());
    return std::nullopt;
  }
};

template <>
struct ValueTraits<std::string> {
  static std::string Name() { return "str"; }
  static c10::IValue ToIValue(std::string v) { return c10::IValue(std::move(v)); }
  static std::optional<std::string> FromIValue(const c10::IValue& v) {
    if (!v.isString()) return std::nullopt;
    return v.toStringRef();
  }
};

template <typename T>
struct ValueTraits<std::optional<T>> {
  static std::string Name() { return "Optional[" + ValueTraits<T>::Name() + "]"; }
  static c10::IValue ToIValue(std::optional<T> v) {
    if (!v.has_value()) return c10::IValue();
    return ValueTraits<T>::ToIValue(*std::move(v));
  }
  static std::optional<std::optional<T>> FromIValue(const c10::IValue& v) {
    // In place: converting an empty optional<T> made gcc -O2 warn (a false
    // -Wmaybe-uninitialized) about the payload it never reads.
    if (v.isNone()) return std::optional<std::optional<T>>(std::in_place);
    auto inner = ValueTraits<T>::FromIValue(v);
    if (!inner.has_value()) return std::nullopt;
    return std::optional<T>(*std::move(inner));
  }
};

namespace value_internal {
// The IValue element type for a list of T, so typed lists stay typed.
template <typename T>
c10::TypePtr ElementType() {
  if constexpr (std::is_same_v<T, at::Tensor>) return c10::TensorType::get();
  else if constexpr (std::is_same_v<T, bool>) return c10::BoolType::get();
  else if constexpr (std::is_integral_v<T>) return c10::IntType::get();
  else if constexpr (std::is_floating_point_v<T>) return c10::FloatType::get();
  else if constexpr (std::is_same_v<T, std::string>) return c10::StringType::get();
  else return c10::AnyType::get();
}
}  // namespace value_internal

template <typename T>
struct ValueTraits<std::vector<T>> {
  static std::string Name() { return "List[" + ValueTraits<T>::Name() + "]"; }
  static c10::IValue ToIValue(std::vector<T> v) {
    c10::impl::GenericList list(value_internal::ElementType<T>());
    list.reserve(v.size());
    for (auto& item : v) list.push_back(ValueTraits<T>::ToIValue(std::move(item)));
    return c10::IValue(std::move(list));
  }
  static std::optional<std::vector<T>> FromIValue(const c10::IValue& v) {
    if (!v.isList()) return std::nullopt;
    std::vector<T> out;
    const auto& items = v.toListRef();
    out.reserve(items.size());
    for (const auto& item : items) {
      auto converted = ValueTraits<T>::FromIValue(item);
      if (!converted.has_value()) return std::nullopt;
      out.push_back(*std::move(converted));
    }
    return out;
  }
};

namespace value_internal {
template <typename MapT>
struct StringMapTraits {
  using V = typename MapT::mapped_type;
  static std::string Name() { return "Dict[str, " + ValueTraits<V>::Name() + "]"; }
  static c10::IValue ToIValue(MapT v) {
    c10::impl::GenericDict dict(c10::StringType::get(), ElementType<V>());
    for (auto& [key, value] : v) {
      dict.insert_or_assign(c10::IValue(key), ValueTraits<V>::ToIValue(std::move(value)));
    }
    return c10::IValue(std::move(dict));
  }
  static std::optional<MapT> FromIValue(const c10::IValue& v) {
    if (!v.isGenericDict()) return std::nullopt;
    MapT out;
    for (const auto& entry : v.toGenericDict()) {
      if (!entry.key().isString()) return std::nullopt;
      auto converted = ValueTraits<V>::FromIValue(entry.value());
      if (!converted.has_value()) return std::nullopt;
      out.emplace(entry.key().toStringRef(), *std::move(converted));
    }
    return out;
  }
};
}  // namespace value_internal

template <typename V>
struct ValueTraits<std::map<std::string, V>>
    : value_internal::StringMapTraits<std::map<std::string, V>> {};
template <typename V>
struct ValueTraits<std::unordered_map<std::string, V>>
    : value_internal::StringMapTraits<std::unordered_map<std::string, V>> {};

// Caller-side convenience: string literals travel as str.
template <>
struct ValueTraits<const char*> {
  static c10::IValue ToIValue(const char* v) { return c10::IValue(std::string(v)); }
};

// True for types that can travel (have a ValueTraits specialization).
template <typename T, typename = void>
struct IsWireType : std::false_type {};
template <typename T>
struct IsWireType<T, std::void_t<decltype(ValueTraits<T>::FromIValue(
                         std::declval<const c10::IValue&>()))>> : std::true_type {};

template <typename T>
c10::IValue ToIValue(T&& value) {
  using Decayed = std::decay_t<T>;
  if constexpr (std::is_array_v<std::remove_reference_t<T>>) {
    return c10::IValue(std::string(value));
  } else {
    return ValueTraits<Decayed>::ToIValue(std::forward<T>(value));
  }
}

// A short type description of a value, e.g. "List[int]" or "Tensor"
// (defined in codec.cc).
std::string DescribeIValue(const c10::IValue& value);

// `value` as T; on a mismatch InvalidArgument "<what> <its type>, expected
// <T's name>" (what: e.g. "function 'f' on worker 'w' returned").
template <typename T>
absl::StatusOr<T> FromIValueOr(const c10::IValue& value, const std::string& what) {
  auto typed = ValueTraits<T>::FromIValue(value);
  if (!typed.has_value()) {
    return absl::InvalidArgumentError(what + " " + DescribeIValue(value) + ", expected " +
                                      ValueTraits<T>::Name());
  }
  return *std::move(typed);
}

}  // namespace tessera::rpc
