#include "ddp/gloo/half_sum.h"

#include <c10/util/Half.h>

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace tessera::ddp {
namespace {

void SumHalfScalar(c10::Half* out, const c10::Half* a, const c10::Half* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = static_cast<c10::Half>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
}

#if defined(__x86_64__)
// Compiled for F16C and AVX whatever the build's flags; called only when
// the CPU has both.
__attribute__((target("avx,f16c"))) void SumHalfF16c(c10::Half* out, const c10::Half* a,
                                                     const c10::Half* b, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // Both inputs are loaded before the store, so out may alias a or b.
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i)));
    const __m256 y = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_add_ps(x, y), _MM_FROUND_TO_NEAREST_INT));
  }
  SumHalfScalar(out + i, a + i, b + i, n - i);
}
#endif

}  // namespace

bool SumHalfIsVectorised() {
#if defined(__x86_64__)
  static const bool f16c = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
  return f16c;
#else
  return false;
#endif
}

void SumHalf(void* out, const void* a, const void* b, size_t n) {
  auto* o = static_cast<c10::Half*>(out);
  const auto* x = static_cast<const c10::Half*>(a);
  const auto* y = static_cast<const c10::Half*>(b);
#if defined(__x86_64__)
  if (SumHalfIsVectorised()) {
    SumHalfF16c(o, x, y, n);
    return;
  }
#endif
  SumHalfScalar(o, x, y, n);
}

}  // namespace tessera::ddp
