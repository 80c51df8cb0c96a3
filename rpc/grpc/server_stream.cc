#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/agent_support.h"
#include "rpc/grpc/frame_codec.h"
#include "rpc/grpc/grpc_agent.h"
#include "rpc/grpc/streams.h"

namespace tessera::rpc {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

}  // namespace

ServerStream::ServerStream(StreamHost* host)
    : host_(host), handshake_(host->settings().secret) {}

void ServerStream::Listen(grpc::AsyncGenericService* service,
                          grpc::ServerCompletionQueue* queue) {
  self_ = shared_from_this();
  Accept(service, queue);
}

void ServerStream::OnArrived(bool ok) {
  if (!ok) {
    // The server is shutting down; this stream never carried a call.
    host_->OnServerStreamDone(-1, absl::OkStatus(), /*said_goodbye=*/false);
    auto self = std::move(self_);
    return;
  }
  host_->ListenForNextStream();
  if (context().method() == kWorkerExchangeMethod) {
    counted_.emplace();
    Start();
    return;
  }
  health_ = HealthMethodOf(context().method());
  if (health_ == HealthMethod::kNone) {
    FinishSoon(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                            absl::StrCat("unknown method ", context().method())));
    return;
  }
  phase_ = Phase::kHealth;
  StartRead(&read_buffer_);  // the probe's one request
}

void ServerStream::AnswerHealthProbe() {
  auto response = HealthResponse(read_buffer_, host_->serving());
  if (!response.ok()) {
    FinishSoon(ToGrpc(response.status()));
    return;
  }
  Write(*std::move(response));
  // Check ends here (once the write is out). Watch stays open, as the
  // status cannot change while the worker serves; the server's shutdown or
  // the prober's cancel ends it.
  if (health_ == HealthMethod::kCheck) FinishSoon(grpc::Status::OK);
}

void ServerStream::Start() {
  // A peer that connects and never proves itself is cut off, so idle
  // connections cannot pile up.
  std::weak_ptr<ServerStream> weak = self_;
  const absl::Duration timeout = host_->settings().handshake_timeout;
  handshake_timer_ = host_->timer()->Schedule(absl::Now() + timeout, [weak, timeout] {
    if (auto stream = weak.lock()) {
      stream->FinishSoon(ToGrpc(absl::UnauthenticatedError(absl::StrCat(
          "no connection handshake within ", absl::FormatDuration(timeout)))));
    }
  });
  StartRead(&read_buffer_);
}

void ServerStream::OnReadDone(bool ok) {
  if (phase_ == Phase::kHealth) {
    if (ok) {
      AnswerHealthProbe();
    } else {
      FinishSoon(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no health request"));
    }
    return;
  }
  if (!ok) {
    // The peer half-closed or left: answer what is under way, then finish.
    {
      MutexLock lock(&mu_);
      reads_done_ = true;
    }
    FinishIfDrained();
    return;
  }
  auto message = DecodeFrame(read_buffer_, host_->settings().limits, host_->buffers());
  if (!message.ok()) {
    TESSERA_LOG(WARNING) << host_->settings().self.name
                         << ": closing incoming stream: bad frame: " << message.status();
    FinishSoon(ToGrpc(Annotate(message.status(), "bad frame")));
    return;
  }
  if (phase_ != Phase::kReady) {
    auto status = HandleHandshake(*message);
    if (!status.ok()) {
      TESSERA_LOG(WARNING) << host_->settings().self.name
                           << ": refused a connection: " << status.message();
      Write(EncodeEnvelopeFrame(ServerHandshake::Rejected(status, host_->settings().self.name)));
      FinishSoon(ToGrpc(status));
      return;
    }
  } else if (!OnRequestFrame(*std::move(message))) {
    return;
  }
  StartRead(&read_buffer_);
}

bool ServerStream::OnRequestFrame(Message message) {
  const auto kind = message.envelope.kind();
  // Checked again when the agent's table changed: a peer not a member at
  // its handshake may have joined since, and one may have been replaced
  // by a newer incarnation (see Note [Fencing stale incarnations]).
  std::optional<int> rechecked;
  if (const uint64_t version = host_->WorkersVersion();
      peer_.has_value() && version != checked_version_) {
    checked_version_ = version;
    rechecked = host_->MemberRankOf(*peer_);
  }
  int from = -1;
  {
    MutexLock lock(&mu_);
    if (rechecked.has_value()) peer_rank_ = *rechecked;
    from = peer_rank_;
    if (kind == proto::CALL || kind == proto::INTERNAL_CALL) ++in_flight_;
  }
  if (kind == proto::GOODBYE) {
    // The caller closes an idle stream: answer what is under way, then
    // finish; not a failure (see Note [Idle connections]).
    {
      MutexLock lock(&mu_);
      said_goodbye_ = true;
      reads_done_ = true;
    }
    FinishIfDrained();
    return false;
  }
  if (kind != proto::CALL && kind != proto::INTERNAL_CALL) {
    FinishSoon(ToGrpc(
        absl::InvalidArgumentError(absl::StrCat("expected a request, got message kind ", kind))));
    return false;
  }
  if (from == kStaleIncarnation) {
    // Answered, not served: the stale process learns why.
    const PeerIdentity& self = host_->settings().self;
    Respond(
        ResponseTo(message.envelope.request_id(),
                   StaleIncarnationError(peer_->name, peer_->rank, peer_->incarnation, self.name),
                   self.name, self.rank));
  } else {
    // The authenticated identity, not what the envelope claims.
    message.envelope.set_origin_rank(from);
    host_->OnRequest(shared_from_this(), from, std::move(message));
  }
  return true;
}

absl::Status ServerStream::HandleHandshake(const Message& message) {
  if (phase_ == Phase::kHello) {
    TESSERA_ASSIGN_OR_RETURN(auto challenge, handshake_.OnHello(message.envelope));
    Write(EncodeEnvelopeFrame(std::move(challenge)));
    phase_ = Phase::kProof;
    return absl::OkStatus();
  }
  TESSERA_ASSIGN_OR_RETURN(auto peer, handshake_.OnProof(message.envelope));
  host_->timer()->Cancel(handshake_timer_);
  checked_version_ = host_->WorkersVersion();  // before the lookup: a change after it shows
  const int member_rank = host_->MemberRankOf(peer);
  if (member_rank == kStaleIncarnation) {
    return StaleIncarnationError(peer.name, peer.rank, peer.incarnation,
                                 host_->settings().self.name);
  }
  {
    MutexLock lock(&mu_);
    peer_rank_ = member_rank;
  }
  peer_ = std::move(peer);
  phase_ = Phase::kReady;
  Write(EncodeEnvelopeFrame(ServerHandshake::Accepted()));
  return absl::OkStatus();
}

void ServerStream::Respond(const Message& response) {
  auto frame = EncodeFrame(response, host_->settings().max_message_bytes);
  if (!frame.ok()) {
    // Too large to send: the caller gets the reason instead of the result.
    const PeerIdentity& self = host_->settings().self;
    frame = EncodeFrame(
        ResponseTo(response.envelope.request_id(), frame.status(), self.name, self.rank),
        host_->settings().max_message_bytes);
  }
  {
    MutexLock lock(&mu_);
    --in_flight_;
  }
  Write(*std::move(frame));
  FinishIfDrained();
}

void ServerStream::Write(grpc::ByteBuffer frame) {
  grpc::ByteBuffer* start = nullptr;
  {
    // Decided under mu_, so no write starts once FinishSoon found the queue idle.
    MutexLock lock(&mu_);
    if (finish_.has_value()) return;  // finishing: the peer is gone or cut off
    start = writes_.Push(std::move(frame));
  }
  if (start != nullptr) StartWrite(start);
}

void ServerStream::OnWriteDone(bool ok) {
  if (!ok) {
    FinishSoon(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    writes_.DropQueued();
  }
  if (grpc::ByteBuffer* next = writes_.Done()) {
    StartWrite(next);
    return;
  }
  grpc::Status status;
  {
    MutexLock lock(&mu_);
    if (!finish_.has_value() || finished_) return;
    finished_ = true;
    status = *finish_;
  }
  Finish(status);
}

void ServerStream::FinishIfDrained() {
  bool drained = false;
  {
    MutexLock lock(&mu_);
    drained = reads_done_ && in_flight_ == 0;
  }
  if (drained) FinishSoon(grpc::Status::OK);
}

void ServerStream::FinishSoon(const grpc::Status& status) {
  {
    MutexLock lock(&mu_);
    if (finish_.has_value()) return;
    finish_ = status;
    if (!status.ok()) {
      why_ = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    // With a write in flight, OnWriteDone finishes; otherwise we do, now.
    if (!writes_.idle() || finished_) return;
    finished_ = true;
  }
  Finish(status);
}

void ServerStream::OnCancel() {
  FinishSoon(grpc::Status::CANCELLED);
  writes_.DropQueued();
}

void ServerStream::OnDone() {
  host_->timer()->Cancel(handshake_timer_);
  int peer_rank = -1;
  absl::Status why;
  bool said_goodbye = false;
  {
    MutexLock lock(&mu_);
    peer_rank = peer_rank_;
    why = why_;
    said_goodbye = said_goodbye_;
  }
  host_->OnServerStreamDone(peer_rank, why, said_goodbye);
  auto self = std::move(self_);  // the last reference may go with this scope
}

}  // namespace tessera::rpc
