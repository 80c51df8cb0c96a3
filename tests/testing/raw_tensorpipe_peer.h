// RawTensorPipePeer: a TensorPipe client that speaks Tessera's frames by
// hand — to play a hostile or buggy peer (bad frames, a wrong secret, a
// replayed handshake) against a real worker.
#pragma once

#include <tensorpipe/tensorpipe.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "rpc/auth/handshake.h"
#include "rpc/message.h"

namespace tessera::testing {

class RawTensorPipePeer {
 public:
  // `gate_secret` is what it proves at the transport gate (see Note [Transport
  // gate]): the job's secret to get through to a worker's TensorPipe.
  explicit RawTensorPipePeer(auth::JobSecret gate_secret = {});
  ~RawTensorPipePeer();

  std::shared_ptr<tensorpipe::Pipe> Connect(const std::string& address);
  // Listens on a free port of 127.0.0.1; returns the address to connect to.
  std::string Listen();
  // The next pipe a worker opens to Listen()'s address, within `wait`.
  absl::StatusOr<std::shared_ptr<tensorpipe::Pipe>> Accept(
      absl::Duration wait = absl::Seconds(30));

  // Writes one frame (Tessera's layout) and waits until it is written.
  static absl::Status Write(const std::shared_ptr<tensorpipe::Pipe>& pipe, rpc::Message message);
  // Reads one frame; Unavailable if the peer closed the pipe instead.
  static absl::StatusOr<rpc::Message> Read(const std::shared_ptr<tensorpipe::Pipe>& pipe);

  // Runs the whole handshake as `self` with `secret`; the worker's verdict.
  static absl::Status Authenticate(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                                   const auth::JobSecret& secret, const rpc::PeerIdentity& self);

 private:
  std::shared_ptr<tensorpipe::Context> context_;
  std::shared_ptr<tensorpipe::Listener> listener_;
};

// A request (CALL of `target`, id `request_id`, no arguments yet) to send
// with RawTensorPipePeer::Write.
rpc::Message CallEnvelope(const std::string& target, uint64_t request_id);

}  // namespace tessera::testing
