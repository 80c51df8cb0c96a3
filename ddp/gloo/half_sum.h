// Element-wise sum of fp16 vectors, the reduction of Half allreduces (DDP's
// fp16 compression hook) and reduce-scatters over Gloo.
//
// Gloo's own gloo::sum<gloo::float16> converts every element to float and
// back in software, with branches: 50 ms for 4 Mi elements on this project's
// machine — most of a DDP step's communication cost under fp16 compression
// (PyTorch's Gloo backend uses it too). This one converts eight elements at a
// time with F16C where the CPU has it (checked at run time; ~1 ms), else
// through c10::Half (~16 ms). Each sum is rounded to fp16 (to nearest even),
// as gloo::sum and c10::Half round.
#pragma once

#include <cstddef>

namespace tessera::ddp {

// out[i] = a[i] + b[i] for n fp16 values; out may alias a or b (Gloo passes
// its accumulator as both output and first input).
void SumHalf(void* out, const void* a, const void* b, size_t n);

// Whether SumHalf takes the F16C path on this CPU (for tests and logs).
bool SumHalfIsVectorised();

}  // namespace tessera::ddp
