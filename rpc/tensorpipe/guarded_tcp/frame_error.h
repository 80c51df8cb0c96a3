// TensorPipe errors of the guarded TCP transport: a frame it refused, a
// peer that failed the transport gate.
#pragma once

#include <memory>
#include <string>

#include "rpc/tensorpipe/guarded_tcp/tensorpipe_internals.h"

namespace tessera::rpc::guarded_tcp {

class FrameError final : public tensorpipe::BaseError {
 public:
  explicit FrameError(std::string message) : message_(std::move(message)) {}
  std::string what() const override { return "bad frame: " + message_; }

 private:
  std::string message_;
};

// The peer did not prove the job secret (see Note [Transport gate]): callers
// report it as Unauthenticated, not as a peer that is down.
class GateRefused final : public tensorpipe::BaseError {
 public:
  explicit GateRefused(std::string message) : message_(std::move(message)) {}
  std::string what() const override { return message_; }

 private:
  std::string message_;
};

inline tensorpipe::Error MakeFrameError(std::string message, const char* file, int line) {
  return tensorpipe::Error(std::make_shared<FrameError>(std::move(message)), file, line);
}

}  // namespace tessera::rpc::guarded_tcp
