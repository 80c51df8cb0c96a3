// Reduce-scatter over a ring of Gloo pairs: bandwidth-optimal, each rank
// sends and receives (size-1)/size of the buffer once (an allreduce-then-
// slice moves about twice that, and every rank computes every chunk).
#pragma once

#include <gloo/context.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tessera::collectives {

// Gloo's elementwise reduction signature: out[i] = a[i] (op) b[i].
using GlooReduceFn = void (*)(void*, const void*, const void*, size_t);

// `data` holds context.size chunks of `chunk_elements` elements of
// `element_size` bytes, this rank's contribution; it is reduced in place so
// that afterwards chunk `context.rank` holds the reduction over all ranks
// (the other chunks hold partial sums). All ranks call it with the same
// `tag` (unique among this group's operations in flight). Throws
// gloo::IoException when a peer does not answer within `timeout`.
void RingReduceScatter(gloo::Context& context, void* data, size_t chunk_elements,
                       size_t element_size, GlooReduceFn reduce, uint32_t tag,
                       std::chrono::milliseconds timeout);

}  // namespace tessera::collectives
