// fp16 and bfloat16 arithmetic of the Gloo backend: the element-wise sums
// that reduce Half and BFloat16 allreduces (DDP's compression hooks) and
// reduce-scatters, and the division that turns an fp16 sum into an average.
//
// Gloo's own gloo::sum<gloo::float16> converts every element to float and
// back in software, with branches: 50 ms for 4 Mi elements on this project's
// machine — most of a DDP step's communication cost under fp16 compression
// (PyTorch's Gloo backend uses it too). SumHalf converts eight elements at a
// time with F16C where the CPU has it (checked at run time; ~1 ms), else
// through c10::Half (~16 ms). ATen's in-place division of a CPU Half tensor
// also goes element by element (~7 ms per 4 Mi in LibTorch 1.13); DivideHalf
// is F16C too. bfloat16 sums through c10::BFloat16 take ~5 ms per 4 Mi;
// SumBFloat16 widens, adds and rounds eight at a time with AVX2.
//
// Every result is what the scalar types give: computed in float, rounded to
// nearest even (fp16: F16C's rounding, as c10::Half; bfloat16: c10's
// round_to_nearest_even, NaN made the quiet 0x7FC0).
#pragma once

#include <cstddef>

namespace tessera::collectives {

// out[i] = a[i] + b[i] for n fp16 values; out may alias a or b (Gloo passes
// its accumulator as both output and first input).
void SumHalf(void* out, const void* a, const void* b, size_t n);

// data[i] = data[i] / divisor for n fp16 values: bit for bit what ATen's
// `div_` gives a Half tensor for a divisor that fp16 holds exactly (any
// world size up to 2048).
void DivideHalf(void* data, size_t n, float divisor);

// out[i] = a[i] + b[i] for n bfloat16 values, as c10::BFloat16's operator+;
// out may alias a or b.
void SumBFloat16(void* out, const void* a, const void* b, size_t n);

// Whether the fp16 functions take the F16C path, and SumBFloat16 the AVX2
// one, on this CPU (for tests and logs).
bool HalfMathIsVectorised();
bool BFloat16MathIsVectorised();

}  // namespace tessera::collectives
