#include "collectives/shm/shm_reduce.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace tessera::collectives {
namespace {

// Elements combined per block: the accumulator stays in L1.
constexpr int64_t kBlock = 1024;

template <typename T>
struct Accumulator {
  using type = T;
};
template <>
struct Accumulator<c10::Half> {
  using type = float;
};
template <>
struct Accumulator<c10::BFloat16> {
  using type = float;
};

template <typename A>
A Combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;  // wraps, as Gloo's does, without UB
        return static_cast<A>(static_cast<U>(a) + static_cast<U>(b));
      }
      return a + b;
    case ReduceOp::kProduct:
      if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        return static_cast<A>(static_cast<U>(a) * static_cast<U>(b));
      }
      return a * b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
  }
  return a;
}

// One loop per op, so that the compiler vectorises each.
template <ReduceOp kOp, typename A, typename T>
void CombineBlock(A* acc, const T* src, int64_t count) {
  for (int64_t i = 0; i < count; ++i) acc[i] = Combine<A>(kOp, acc[i], static_cast<A>(src[i]));
}

template <typename T>
void ReduceTyped(ReduceOp op, const void* const* srcs, int n, int64_t count, int divisor,
                 void* out_raw, void* copy_raw) {
  using A = typename Accumulator<T>::type;
  T* out = static_cast<T*>(out_raw);
  T* copy = static_cast<T*>(copy_raw);
  A acc[kBlock];
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t len = std::min(kBlock, count - start);
    const T* first = static_cast<const T*>(srcs[0]) + start;
    for (int64_t i = 0; i < len; ++i) acc[i] = static_cast<A>(first[i]);
    for (int s = 1; s < n; ++s) {
      const T* src = static_cast<const T*>(srcs[s]) + start;
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAverage:
          CombineBlock<ReduceOp::kSum>(acc, src, len);
          break;
        case ReduceOp::kProduct:
          CombineBlock<ReduceOp::kProduct>(acc, src, len);
          break;
        case ReduceOp::kMin:
          CombineBlock<ReduceOp::kMin>(acc, src, len);
          break;
        case ReduceOp::kMax:
          CombineBlock<ReduceOp::kMax>(acc, src, len);
          break;
      }
    }
    if constexpr (std::is_floating_point_v<A>) {
      if (op == ReduceOp::kAverage) {
        for (int64_t i = 0; i < len; ++i) acc[i] /= static_cast<A>(divisor);
      }
    }
    for (int64_t i = 0; i < len; ++i) out[start + i] = static_cast<T>(acc[i]);
    if (copy != nullptr) std::memcpy(copy + start, out + start, len * sizeof(T));
  }
}

template <typename Fn>
bool Dispatch(c10::ScalarType dtype, Fn fn) {
  switch (dtype) {
    case c10::ScalarType::Float:
      fn(float{});
      return true;
    case c10::ScalarType::Double:
      fn(double{});
      return true;
    case c10::ScalarType::Half:
      fn(c10::Half{});
      return true;
    case c10::ScalarType::BFloat16:
      fn(c10::BFloat16{});
      return true;
    case c10::ScalarType::Char:
      fn(int8_t{});
      return true;
    case c10::ScalarType::Byte:
      fn(uint8_t{});
      return true;
    case c10::ScalarType::Int:
      fn(int32_t{});
      return true;
    case c10::ScalarType::Long:
      fn(int64_t{});
      return true;
    default:
      return false;
  }
}

}  // namespace

absl::Status CheckReducible(c10::ScalarType dtype, ReduceOp op) {
  if (!Dispatch(dtype, [](auto) {})) {
    return absl::InvalidArgumentError(absl::StrCat("the shared-memory collectives do not reduce ",
                                                   c10::toString(dtype), " tensors"));
  }
  if (op == ReduceOp::kAverage && !c10::isFloatingType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("an average of ", c10::toString(dtype),
                                                   " tensors (use a floating type, or sum)"));
  }
  return absl::OkStatus();
}

void ReduceElements(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int n,
                    int64_t count, int divisor, void* out, void* copy) {
  Dispatch(dtype,
           [&](auto zero) { ReduceTyped<decltype(zero)>(op, srcs, n, count, divisor, out, copy); });
}

void DivideElements(c10::ScalarType dtype, void* data, int64_t count, int divisor) {
  Dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    using A = typename Accumulator<T>::type;
    if constexpr (std::is_floating_point_v<A>) {
      T* values = static_cast<T*>(data);
      for (int64_t i = 0; i < count; ++i) {
        values[i] = static_cast<T>(static_cast<A>(values[i]) / static_cast<A>(divisor));
      }
    }
  });
}

}  // namespace tessera::collectives
