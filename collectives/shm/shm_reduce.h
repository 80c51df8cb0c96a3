// The element-wise reductions of the shared-memory collectives.
//
// Deterministic by construction: an element's result is always
// op(...op(op(src[0], src[1]), src[2])..., src[n-1]), whichever rank
// computes it, so every rank ends with the same bits. fp16 and bfloat16 are
// combined in float and rounded once (more exact than rounding per step);
// integers are exact (two's-complement wrap-around on overflow).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "absl/status/status.h"
#include "collectives/process_group.h"

namespace tessera::collectives {

// Whether `dtype` and `op` can be reduced here (average: floating types only).
absl::Status CheckReducible(c10::ScalarType dtype, ReduceOp op);

// For i in [0, count): out[i] = reduction of srcs[0..n)[i] (an average
// divides the sum by `divisor`); also written to `copy` when not null.
void ReduceElements(c10::ScalarType dtype, ReduceOp op, const void* const* srcs, int n,
                    int64_t count, int divisor, void* out, void* copy);

// data[i] /= divisor for a floating `dtype` (fp16/bf16 through float).
void DivideElements(c10::ScalarType dtype, void* data, int64_t count, int divisor);

}  // namespace tessera::collectives
