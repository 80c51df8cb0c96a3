#include "tests/testing/raw_tensorpipe_peer.h"

#include "common/future.h"
#include "common/status.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

namespace tessera::testing {

namespace tp = tensorpipe;

namespace {
// Long enough for a loaded machine; a worker that never answers fails the test, not hangs it.
constexpr absl::Duration kWait = absl::Seconds(30);
}  // namespace

RawTensorPipePeer::RawTensorPipePeer(auth::JobSecret gate_secret)
    : context_(std::make_shared<tp::Context>()) {
  rpc::GuardedTcpOptions options;
  options.secret = std::move(gate_secret);
  context_->registerTransport(0, "tcp", rpc::CreateGuardedTcpTransport(options));
  context_->registerChannel(0, "basic", tp::channel::basic::create());
}

RawTensorPipePeer::~RawTensorPipePeer() {
  if (listener_ != nullptr) listener_->close();
  context_->close();
  context_->join();
}

std::shared_ptr<tp::Pipe> RawTensorPipePeer::Connect(const std::string& address) {
  return context_->connect(address);
}

std::string RawTensorPipePeer::Listen() {
  listener_ = context_->listen({"tcp://127.0.0.1:0"});
  return listener_->url("tcp");
}

absl::StatusOr<std::shared_ptr<tp::Pipe>> RawTensorPipePeer::Accept(absl::Duration wait) {
  Promise<std::shared_ptr<tp::Pipe>> accepted;
  listener_->accept([accepted](const tp::Error& error, std::shared_ptr<tp::Pipe> pipe) {
    if (error) {
      accepted.Set(absl::UnavailableError(error.what()));
    } else {
      accepted.Set(std::move(pipe));
    }
  });
  return accepted.GetFuture().Wait(wait);
}

absl::Status RawTensorPipePeer::Write(const std::shared_ptr<tp::Pipe>& pipe,
                                      rpc::Message message) {
  Promise<bool> written;
  rpc::WriteMessage(pipe, std::make_shared<rpc::Message>(std::move(message)),
                    [written](const tp::Error& error) {
                      if (error) {
                        written.Set(absl::UnavailableError(error.what()));
                      } else {
                        written.Set(true);
                      }
                    });
  return written.GetFuture().Wait(kWait).status();
}

absl::StatusOr<rpc::Message> RawTensorPipePeer::Read(const std::shared_ptr<tp::Pipe>& pipe) {
  Promise<rpc::Message> read;
  rpc::ReadFrame(pipe, rpc::CodecLimits(), nullptr, nullptr,
                 [read](absl::StatusOr<rpc::Message> message) { read.Set(std::move(message)); });
  return read.GetFuture().Wait(kWait);
}

absl::Status RawTensorPipePeer::Authenticate(const std::shared_ptr<tp::Pipe>& pipe,
                                             const auth::JobSecret& secret,
                                             const rpc::PeerIdentity& self) {
  rpc::ClientHandshake handshake(secret, self);
  rpc::Message hello;
  hello.envelope = handshake.Hello();
  TESSERA_RETURN_IF_ERROR(Write(pipe, std::move(hello)));
  TESSERA_ASSIGN_OR_RETURN(rpc::Message challenge, Read(pipe));
  rpc::Message proof;
  TESSERA_ASSIGN_OR_RETURN(proof.envelope, handshake.OnChallenge(challenge.envelope));
  TESSERA_RETURN_IF_ERROR(Write(pipe, std::move(proof)));
  TESSERA_ASSIGN_OR_RETURN(rpc::Message result, Read(pipe));
  return handshake.OnResult(result.envelope);
}

rpc::Message CallEnvelope(const std::string& target, uint64_t request_id) {
  rpc::Message message;
  message.envelope.set_kind(proto::CALL);
  message.envelope.set_target(target);
  message.envelope.set_request_id(request_id);
  return message;
}

}  // namespace tessera::testing
