// A TensorPipe error for a frame this transport refused.
#pragma once

#include <tensorpipe/common/error.h>

#include <memory>
#include <string>

namespace tessera::rpc::guarded_tcp {

class FrameError final : public tensorpipe::BaseError {
 public:
  explicit FrameError(std::string message) : message_(std::move(message)) {}
  std::string what() const override { return "bad frame: " + message_; }

 private:
  std::string message_;
};

inline tensorpipe::Error MakeFrameError(std::string message, const char* file, int line) {
  return tensorpipe::Error(std::make_shared<FrameError>(std::move(message)), file, line);
}

}  // namespace tessera::rpc::guarded_tcp
