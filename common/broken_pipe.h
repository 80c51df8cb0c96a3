// Writes to a dead peer's socket must be errors, not the end of the process.
//
// Note [SIGPIPE]: a write to a socket whose peer is gone raises SIGPIPE,
// and its default action kills the process. Gloo's TCP pairs write with
// writev and TensorPipe's shm transport with send, neither with
// MSG_NOSIGNAL: a rank that dies mid-collective would kill its survivors
// too (seen: a Gloo allreduce after its peer's exit killed the caller
// about one run in thirty). Python ignores SIGPIPE at start-up, which is
// why PyTorch's users never meet it; a C++ program does not. So every
// transport that can write to a dead peer calls this first.
#pragma once

namespace tessera {

// Ignores SIGPIPE process-wide (writes then fail with EPIPE), unless the
// application installed a handler of its own, which is left alone.
void IgnoreBrokenPipeSignals();

}  // namespace tessera
