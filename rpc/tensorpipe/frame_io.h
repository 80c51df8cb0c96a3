// Moving one Tessera Message through a TensorPipe pipe: the envelope in the
// message metadata, each tensor as a TensorPipe tensor (no copy on send).
// Reading validates everything before allocating (rpc/codec.h).
#pragma once

#include <tensorpipe/core/pipe.h>

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/buffer_pool.h"
#include "rpc/codec.h"
#include "rpc/message.h"
#include "rpc/tensorpipe/fd_inbox.h"

namespace tessera::rpc {

// A pipe's error as a status: Unauthenticated when the peer failed the
// transport gate (see Note [Transport gate]), else Unavailable; `context`
// prefixes the message.
absl::Status StatusFromPipeError(const tensorpipe::Error& error, const std::string& context);

// Where a message's tensors in shared memory may go as handles (see Note
// [Tensors in shared memory]): this worker's inbox, to post from, the
// peer's inbox name, and those tensors' bytes (which then do not travel,
// but for tensors past a post's worth or a post that failed).
// No inbox: every tensor's bytes travel.
struct SharedMemoryRoute {
  FdInbox* inbox = nullptr;
  std::string peer_inbox;
  uint64_t shared_bytes = 0;
};

// The bytes of `message`'s tensors that are in shared memory (0: a route is
// not worth looking up). Those do not travel when the message has a route.
uint64_t BytesInSharedMemory(const Message& message);

// Sends `message` on `pipe`; `done` runs with the transport's error, if any.
// The message (and so its tensors) stays alive until the write completes.
// Its tensors in shared memory go as handles by `route`, if it has one.
void WriteMessage(const std::shared_ptr<tensorpipe::Pipe>& pipe, std::shared_ptr<Message> message,
                  std::function<void(const tensorpipe::Error&)> done,
                  const SharedMemoryRoute& route = {});

// Reads one frame: descriptor, validation, receive buffers (from `buffers`),
// data; tensors sent as handles are taken from `inbox` (none: such a frame
// is refused). `done` gets the message, or why the frame was rejected
// (InvalidArgument) or the pipe failed (StatusFromPipeError).
void ReadFrame(std::shared_ptr<tensorpipe::Pipe> pipe, const CodecLimits& limits,
               BufferPool* buffers, FdInbox* inbox,
               std::function<void(absl::StatusOr<Message>)> done);

}  // namespace tessera::rpc
