#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/grpc/frame_codec.h"
#include "rpc/grpc/streams.h"
#include "rpc/queue_limits.h"

namespace tessera::rpc {

ClientStream::ClientStream(StreamHost* host, uint64_t id, int peer_rank,
                           std::atomic<int>* idle_count)
    : use(idle_count),
      host_(host),
      id_(id),
      peer_rank_(peer_rank),
      handshake_(host->settings().secret, host->settings().self) {}

void ClientStream::Start(grpc::GenericStub* stub, const std::string& method,
                         grpc::CompletionQueue* queue) {
  self_ = shared_from_this();
  // Fail at once when the peer is unreachable (calls have deadlines; the
  // agent reconnects on the next call).
  context().set_wait_for_ready(false);
  StartCall(stub, method, queue, &read_buffer_);
}

void ClientStream::OnOpened() { Write(EncodeEnvelopeFrame(handshake_.Hello())); }

absl::Status ClientStream::Send(const Message& request) {
  TESSERA_ASSIGN_OR_RETURN(auto frame, EncodeFrame(request, host_->settings().max_message_bytes));
  grpc::ByteBuffer* start = nullptr;
  {
    // Queued under mu_, so a request never overtakes one that waited for
    // the handshake (a pipe keeps its callers' order, as TensorPipe's does).
    MutexLock lock(&mu_);
    if (ending_) return failure_.ok() ? absl::UnavailableError("stream ended") : failure_;
    const uint64_t waiting = before_ready_bytes_ + writes_.bytes();
    const uint64_t bytes = frame.Length();
    const uint64_t limit = host_->settings().max_unsent_bytes;
    if (!FitsUnsentBytes(waiting, bytes, limit)) {
      return UnsentBytesExhausted(waiting, bytes, limit, host_->settings().self.name);
    }
    if (!ready_) {
      before_ready_bytes_ += bytes;
      before_ready_.push_back(std::move(frame));
      return absl::OkStatus();
    }
    start = writes_.Push(std::move(frame));
  }
  if (start != nullptr) StartWrite(start);
  return absl::OkStatus();
}

void ClientStream::SayGoodbye() {
  proto::Envelope goodbye;
  goodbye.set_kind(proto::GOODBYE);
  Write(EncodeEnvelopeFrame(goodbye));
}

void ClientStream::Write(grpc::ByteBuffer frame) {
  if (grpc::ByteBuffer* next = writes_.Push(std::move(frame))) StartWrite(next);
}

void ClientStream::OnWriteDone(bool ok) {
  if (!ok) return;  // the stream broke; the read fails too and ends it
  if (grpc::ByteBuffer* next = writes_.Done()) StartWrite(next);
}

void ClientStream::OnReadDone(bool ok) {
  if (!ok) {
    {
      MutexLock lock(&mu_);
      ending_ = true;
    }
    StopReading();
    return;
  }
  auto message = DecodeFrame(read_buffer_, host_->settings().limits, host_->buffers());
  absl::Status status = message.status();
  if (status.ok()) {
    if (phase_ != Phase::kReady) {
      status = HandleHandshake(*message);
    } else if (message->envelope.kind() != proto::RESPONSE) {
      status = absl::InvalidArgumentError("peer sent a non-response on a client stream");
    } else {
      host_->OnResponse(*std::move(message));
      if (use.Release()) host_->OnClientStreamIdle();
    }
  }
  if (!status.ok()) {
    Fail(status);
    return;
  }
  StartRead(&read_buffer_);
}

absl::Status ClientStream::HandleHandshake(const Message& message) {
  if (phase_ == Phase::kChallenge) {
    TESSERA_ASSIGN_OR_RETURN(auto proof, handshake_.OnChallenge(message.envelope));
    Write(EncodeEnvelopeFrame(std::move(proof)));
    phase_ = Phase::kResult;
    return absl::OkStatus();
  }
  TESSERA_RETURN_IF_ERROR(handshake_.OnResult(message.envelope));
  phase_ = Phase::kReady;
  grpc::ByteBuffer* start = nullptr;
  {
    MutexLock lock(&mu_);
    ready_ = true;
    for (auto& frame : before_ready_) {
      if (grpc::ByteBuffer* first = writes_.Push(std::move(frame))) start = first;
    }
    before_ready_.clear();
    before_ready_bytes_ = 0;
  }
  if (start != nullptr) StartWrite(start);
  return absl::OkStatus();
}

void ClientStream::Fail(const absl::Status& why) {
  {
    MutexLock lock(&mu_);
    if (failure_.ok()) failure_ = why;
    ending_ = true;
  }
  Cancel();
  // The read loop stops here; OnReadDone(false) will not come for it.
  StopReading();
}

void ClientStream::OnDone(const grpc::Status& status) {
  absl::Status why;
  {
    MutexLock lock(&mu_);
    ending_ = true;
    why = failure_;
    before_ready_.clear();
    before_ready_bytes_ = 0;
  }
  use.Ended();
  if (why.ok()) {
    why = absl::UnavailableError(absl::StrCat(
        "stream ended (", status.error_code(), ": ", status.error_message(), ")"));
  }
  host_->OnClientStreamDone(this, why);
  auto self = std::move(self_);  // the last reference may go with this scope
}

}  // namespace tessera::rpc
