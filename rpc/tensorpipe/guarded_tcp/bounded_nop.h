// Parsing TensorPipe's control objects (nop encoding) from a peer's frame
// without trusting the frame.
//
// Note [Bounded nop reads]: TensorPipe's NopReader checks a length before
// reading a run of bytes, but not before reading a single byte (an encoding
// prefix): past the end of its buffer it moves to a second one, null for a
// one-buffer reader. So a frame that ends where its encoding says more
// follows — eight zero bytes, a truncated hello, a map whose count exceeds
// its entries — made it dereference null and killed the worker. nop's
// encoding describes itself (each value's first byte says what follows), so
// ReadNopBounded first walks the frame's structure with bounds checks of
// its own and refuses any frame whose encoding does not fit in it, is deeper
// than kMaxNopDepth, or uses encodings TensorPipe never sends (tables,
// handles, errors, extensions); only then does it let NopReader parse the
// typed object, which reads the same structure and so stays within it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

inline constexpr int kMaxNopDepth = 32;

// Reads `object` from `data[0, length)`: an error (never a crash, never an
// allocation beyond what the frame holds) if the bytes are not an encoding
// of it.
nop::Status<void> ReadNopBounded(tensorpipe::AbstractNopHolder& object, const void* data,
                                 size_t length);

// The walk alone: true when one whole nop value starts at data[0] and ends
// within `length` bytes (its size in `*consumed`).
bool NopValueFits(const uint8_t* data, size_t length, size_t* consumed);

}  // namespace tessera::rpc::guarded_tcp
