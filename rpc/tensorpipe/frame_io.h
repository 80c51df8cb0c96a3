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

namespace tessera::rpc {

// A pipe's error as a status: Unauthenticated when the peer failed the
// transport gate (Note [Transport gate]), else Unavailable; `context`
// prefixes the message.
absl::Status StatusFromPipeError(const tensorpipe::Error& error, const std::string& context);

// Sends `message` on `pipe`; `done` runs with the transport's error, if any.
// The message (and so its tensors) stays alive until the write completes.
void WriteMessage(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                  std::shared_ptr<Message> message,
                  std::function<void(const tensorpipe::Error&)> done);

// Reads one frame: descriptor, validation, receive buffers (from `buffers`),
// data. `done` gets the message, or why the frame was rejected
// (InvalidArgument) or the pipe failed (StatusFromPipeError).
void ReadFrame(std::shared_ptr<tensorpipe::Pipe> pipe, const CodecLimits& limits,
               BufferPool* buffers, std::function<void(absl::StatusOr<Message>)> done);

}  // namespace tessera::rpc
