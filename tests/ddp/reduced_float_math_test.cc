// The fp16 and bfloat16 arithmetic of the Gloo backend, against the scalar
// types it replaces, on random bit patterns (so subnormals, overflow to
// infinity and NaN all occur), for lengths that exercise the eight-wide
// vector paths and their scalar tails:
// - SumHalf: every element equals c10::Half's float-and-round sum (Gloo's
//   own semantics), also with the output aliasing an input as Gloo calls it;
// - DivideHalf: bit for bit ATen's `div_` of a Half tensor;
// - SumBFloat16: bit for bit c10::BFloat16's operator+.
#include "collectives/gloo/reduced_float_math.h"

#include <ATen/ops/from_blob.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tessera::collectives {
namespace {

uint16_t Bits(c10::Half h) {
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof(bits));
  return bits;
}

c10::Half FromBits(uint16_t bits) {
  c10::Half h;
  std::memcpy(&h, &bits, sizeof(bits));
  return h;
}

// Random fp16 values of every kind: the bits are drawn uniformly, so
// subnormals, large values (whose sums overflow) and NaNs all occur.
std::vector<c10::Half> RandomHalves(size_t n, std::mt19937& rng) {
  std::vector<c10::Half> v(n);
  for (auto& h : v) h = FromBits(static_cast<uint16_t>(rng()));
  return v;
}

// Equal as fp16 results: the same bits, or both NaN (NaN payloads may differ).
bool SameResult(c10::Half got, c10::Half want) {
  if (std::isnan(static_cast<float>(want))) return std::isnan(static_cast<float>(got));
  return Bits(got) == Bits(want);
}

TEST(SumHalfTest, EqualsFloatAndRoundForEveryLengthAndKindOfValue) {
  std::printf("fp16 vectorised (F16C): %s; bfloat16 vectorised (AVX2): %s\n",
              HalfMathIsVectorised() ? "yes" : "no", BFloat16MathIsVectorised() ? "yes" : "no");
  std::mt19937 rng(5);
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{15}, size_t{16},
                   size_t{17}, size_t{33}, size_t{1000003}}) {
    const std::vector<c10::Half> a = RandomHalves(n, rng);
    const std::vector<c10::Half> b = RandomHalves(n, rng);
    std::vector<c10::Half> out(n);
    SumHalf(out.data(), a.data(), b.data(), n);
    std::vector<c10::Half> in_place = a;  // out aliasing the first input
    SumHalf(in_place.data(), in_place.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const auto want = static_cast<c10::Half>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
      ASSERT_TRUE(SameResult(out[i], want))
          << "n=" << n << " i=" << i << ": " << static_cast<float>(a[i]) << " + "
          << static_cast<float>(b[i]) << " gave " << static_cast<float>(out[i]) << ", want "
          << static_cast<float>(want);
      ASSERT_TRUE(SameResult(in_place[i], want)) << "in place, n=" << n << " i=" << i;
    }
  }
}

TEST(SumHalfTest, RoundsHalfwayCasesToEven) {
  // 2048 + 1 lies halfway between fp16's neighbours 2048 and 2050: to even
  // gives 2048; 2050 + 1 halfway between 2050 and 2052 gives 2052.
  const std::vector<c10::Half> a(9, c10::Half(2048.0f));
  std::vector<c10::Half> b(9, c10::Half(1.0f));
  std::vector<c10::Half> out(9);
  SumHalf(out.data(), a.data(), b.data(), 9);
  for (const auto& h : out) EXPECT_EQ(static_cast<float>(h), 2048.0f);
  const std::vector<c10::Half> c(9, c10::Half(2050.0f));
  SumHalf(out.data(), c.data(), b.data(), 9);
  for (const auto& h : out) EXPECT_EQ(static_cast<float>(h), 2052.0f);
}

TEST(DivideHalfTest, EqualsAtenDivisionForEveryLengthDivisorAndKindOfValue) {
  std::mt19937 rng(7);
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{17}, size_t{1000003}}) {
    for (int divisor : {1, 2, 3, 7, 2048}) {
      const std::vector<c10::Half> values = RandomHalves(n, rng);
      std::vector<c10::Half> want = values;
      at::from_blob(want.data(), {static_cast<int64_t>(n)}, at::kHalf).div_(divisor);
      std::vector<c10::Half> got = values;
      DivideHalf(got.data(), n, static_cast<float>(divisor));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_TRUE(SameResult(got[i], want[i]))
            << "n=" << n << " i=" << i << ": " << static_cast<float>(values[i]) << " / " << divisor
            << " gave " << static_cast<float>(got[i]) << ", ATen gives "
            << static_cast<float>(want[i]);
      }
    }
  }
}

TEST(SumBFloat16Test, EqualsC10BFloat16AdditionForEveryLengthAndKindOfValue) {
  std::mt19937 rng(9);
  auto random = [&](size_t n) {
    std::vector<c10::BFloat16> v(n);
    for (auto& x : v) x = c10::BFloat16(static_cast<uint16_t>(rng()), c10::BFloat16::from_bits());
    return v;
  };
  for (size_t n :
       {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{17}, size_t{1000003}}) {
    const std::vector<c10::BFloat16> a = random(n);
    const std::vector<c10::BFloat16> b = random(n);
    std::vector<c10::BFloat16> out(n);
    SumBFloat16(out.data(), a.data(), b.data(), n);
    std::vector<c10::BFloat16> in_place = a;
    SumBFloat16(in_place.data(), in_place.data(), b.data(), n);
    for (size_t i = 0; i < n; ++i) {
      const c10::BFloat16 want = a[i] + b[i];
      ASSERT_EQ(out[i].x, want.x) << "n=" << n << " i=" << i << ": " << static_cast<float>(a[i])
                                  << " + " << static_cast<float>(b[i]) << " gave "
                                  << static_cast<float>(out[i]) << ", want "
                                  << static_cast<float>(want);
      ASSERT_EQ(in_place[i].x, want.x) << "in place, n=" << n << " i=" << i;
    }
  }
}

TEST(SumBFloat16Test, RoundsHalfwayCasesToEven) {
  // 256 + 1 lies halfway between bfloat16's neighbours 256 and 258: to even
  // gives 256; 258 + 1 halfway between 258 and 260 gives 260.
  const std::vector<c10::BFloat16> one(9, c10::BFloat16(1.0f));
  std::vector<c10::BFloat16> out(9);
  const std::vector<c10::BFloat16> a(9, c10::BFloat16(256.0f));
  SumBFloat16(out.data(), a.data(), one.data(), 9);
  for (const auto& x : out) EXPECT_EQ(static_cast<float>(x), 256.0f);
  const std::vector<c10::BFloat16> c(9, c10::BFloat16(258.0f));
  SumBFloat16(out.data(), c.data(), one.data(), 9);
  for (const auto& x : out) EXPECT_EQ(static_cast<float>(x), 260.0f);
}

}  // namespace
}  // namespace tessera::collectives
