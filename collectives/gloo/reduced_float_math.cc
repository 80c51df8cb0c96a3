#include "collectives/gloo/reduced_float_math.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace tessera::collectives {
namespace {

void SumHalfScalar(c10::Half* out, const c10::Half* a, const c10::Half* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<c10::Half>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
}

void DivideHalfScalar(c10::Half* data, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) {
    data[i] = static_cast<c10::Half>(static_cast<float>(data[i]) / divisor);
  }
}

void SumBFloat16Scalar(c10::BFloat16* out, const c10::BFloat16* a, const c10::BFloat16* b,
                       size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

#if defined(__x86_64__)
// The vector paths are compiled for their instruction sets whatever the
// build's flags, and called only when the CPU has them. In each, all inputs
// of a block are loaded before its store, so out may alias an input.

__attribute__((target("avx,f16c"))) void SumHalfF16c(c10::Half* out, const c10::Half* a,
                                                     const c10::Half* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  SumHalfScalar(out + i, a + i, b + i, n - i);
}

__attribute__((target("avx,f16c"))) void DivideHalfF16c(c10::Half* data, size_t n, float divisor) {
  const __m256 by = _mm256_set1_ps(divisor);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    auto* at = reinterpret_cast<__m128i*>(data + i);
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(at));
    _mm_storeu_si128(at, _mm256_cvtps_ph(_mm256_div_ps(x, by), _MM_FROUND_TO_NEAREST_INT));
  }
  DivideHalfScalar(data + i, n - i, divisor);
}

// Eight bfloat16 values widened to float: their bits become the high half.
__attribute__((target("avx2"))) __m256 WidenBFloat16(const c10::BFloat16* p) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}

// c10::detail::round_to_nearest_even, eight at a time: add 0x7FFF plus the
// lowest kept bit, keep the high half; NaN becomes 0x7FC0.
__attribute__((target("avx2"))) __m128i NarrowToBFloat16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i kept = _mm256_srli_epi32(
      _mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  kept = _mm256_blendv_epi8(kept, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(nan));
  // Every lane holds 0..0xFFFF, so the saturating pack keeps it exactly.
  return _mm_packus_epi32(_mm256_castsi256_si128(kept), _mm256_extracti128_si256(kept, 1));
}

__attribute__((target("avx2"))) void SumBFloat16Avx2(c10::BFloat16* out, const c10::BFloat16* a,
                                                     const c10::BFloat16* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 sum = _mm256_add_ps(WidenBFloat16(a + i), WidenBFloat16(b + i));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), NarrowToBFloat16(sum));
  }
  SumBFloat16Scalar(out + i, a + i, b + i, n - i);
}
#endif

}  // namespace

bool HalfMathIsVectorised() {
#if defined(__x86_64__)
  // F16C from CPUID itself: clang's __builtin_cpu_supports has no "f16c".
  static const bool f16c = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __builtin_cpu_supports("avx") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 &&
           (ecx & bit_F16C) != 0;
  }();
  return f16c;
#else
  return false;
#endif
}

bool BFloat16MathIsVectorised() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

void SumHalf(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<c10::Half*>(out);
  const auto* x = static_cast<const c10::Half*>(a);
  const auto* y = static_cast<const c10::Half*>(b);
#if defined(__x86_64__)
  if (HalfMathIsVectorised()) return SumHalfF16c(o, x, y, n);
#endif
  SumHalfScalar(o, x, y, n);
}

void DivideHalf(void* data, size_t n, float divisor) {
  auto* d = static_cast<c10::Half*>(data);
#if defined(__x86_64__)
  if (HalfMathIsVectorised()) return DivideHalfF16c(d, n, divisor);
#endif
  DivideHalfScalar(d, n, divisor);
}

void SumBFloat16(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<c10::BFloat16*>(out);
  const auto* x = static_cast<const c10::BFloat16*>(a);
  const auto* y = static_cast<const c10::BFloat16*>(b);
#if defined(__x86_64__)
  if (BFloat16MathIsVectorised()) return SumBFloat16Avx2(o, x, y, n);
#endif
  SumBFloat16Scalar(o, x, y, n);
}

}  // namespace tessera::collectives
