// Parsing TensorPipe's control objects (nop encoding) from a peer's frame
// without trusting the frame.
//
// Note [Bounded nop reads]: TensorPipe's NopReader checks a length before
// reading a run of bytes, but not before reading a single byte (an encoding
// prefix): past the end of its buffer it switches to a second buffer, which
// is null for a one-buffer reader. A frame that ends where the encoding says
// more follows — eight zero bytes, a truncated hello — made it dereference
// null and killed the worker. ReadNopBounded gives the reader a second
// buffer of zeros to run into instead (no nop aggregate starts with a zero
// byte, so a parse that reaches it fails at the next aggregate, and runs of
// primitives are bounded by the guard), then refuses any parse that used it.
#pragma once

#include <tensorpipe/common/nop.h>

#include <cstddef>

namespace tessera::rpc::guarded_tcp {

// Reads `object` from exactly `data[0, length)`: an error (never a crash)
// if the bytes are not a complete encoding of it.
nop::Status<void> ReadNopBounded(tensorpipe::AbstractNopHolder& object, const void* data,
                                 size_t length);

}  // namespace tessera::rpc::guarded_tcp
