// The two ends of a gRPC agent's connection: ClientStream, the stream this
// worker opened to a peer (its requests out, their responses back), and
// ServerStream, a stream a peer opened to us (its requests in, our
// responses out). Each runs the connection handshake (rpc/auth/) before
// anything else and reports to its StreamHost, the agent.
//
// Lifetime: a stream owns itself (self_) from Start() until gRPC's OnDone,
// after which gRPC never touches it; others hold shared_ptrs to write to it
// later, which then become no-ops.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/generic/generic_stub.h>

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "common/deadline_timer.h"
#include "rpc/auth/handshake.h"
#include "rpc/buffer_pool.h"
#include "rpc/codec.h"
#include "rpc/grpc/write_queue.h"
#include "rpc/message.h"

namespace tessera::rpc {

class ClientStream;
class ServerStream;

struct StreamSettings {
  PeerIdentity self;
  JobSecret secret;
  CodecLimits limits;
  size_t max_message_bytes = 0;
  absl::Duration handshake_timeout;
};

class StreamHost {
 public:
  virtual ~StreamHost() = default;
  virtual const StreamSettings& settings() const = 0;
  virtual BufferPool* buffers() = 0;
  virtual DeadlineTimer* timer() = 0;
  // A response came back on one of our client streams.
  virtual void OnResponse(Message response) = 0;
  // Client stream `stream` ended; `why` fails the calls still on it.
  virtual void OnClientStreamDone(ClientStream* stream, const absl::Status& why) = 0;
  // An authenticated peer's request arrived; answer with stream->Respond().
  virtual void OnRequest(std::shared_ptr<ServerStream> stream, int from_rank,
                         Message request) = 0;
  // The rank to serve an authenticated peer as (rpc_agent.h's MemberRank).
  virtual int MemberRankOf(const PeerIdentity& peer) const = 0;
  // A server stream ended; `peer_rank` is -1 unless a worker of the job.
  virtual void OnServerStreamDone(int peer_rank, const absl::Status& why) = 0;
};

class ClientStream final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                           public std::enable_shared_from_this<ClientStream> {
 public:
  ClientStream(StreamHost* host, uint64_t id, int peer_rank);

  // Opens the stream and sends the handshake's hello.
  void Start(grpc::GenericStub* stub, const std::string& method);
  // Queues a request (written once the handshake is done). An error if the
  // stream is ending or the frame is too large; nothing was sent then.
  absl::Status Send(const Message& request);
  // Ends the stream; OnDone follows.
  void Cancel() { context_.TryCancel(); }

  uint64_t id() const { return id_; }
  int peer_rank() const { return peer_rank_; }

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Write(grpc::ByteBuffer frame);
  absl::Status HandleHandshake(const Message& message);
  void Fail(const absl::Status& why);

  StreamHost* const host_;
  const uint64_t id_;
  const int peer_rank_;
  grpc::ClientContext context_;
  ClientHandshake handshake_;
  grpc::ByteBuffer read_buffer_;  // touched only by read reactions
  enum class Phase { kChallenge, kResult, kReady } phase_ = Phase::kChallenge;
  WriteQueue writes_;

  Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ByteBuffer> before_ready_ ABSL_GUARDED_BY(mu_);
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ClientStream> self_;
};

class ServerStream final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                           public std::enable_shared_from_this<ServerStream> {
 public:
  explicit ServerStream(StreamHost* host);

  // Starts reading the handshake (call once, right after construction).
  void Start();
  // Sends the response to a request from OnRequest (any thread).
  void Respond(const Message& response);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  absl::Status HandleHandshake(const Message& message);
  void Write(grpc::ByteBuffer frame);
  // Finishes with `status` once the write in flight (if any) is done.
  void FinishSoon(const grpc::Status& status);
  void FinishIfDrained();

  StreamHost* const host_;
  ServerHandshake handshake_;
  grpc::ByteBuffer read_buffer_;  // touched only by read reactions
  enum class Phase { kHello, kProof, kReady } phase_ = Phase::kHello;
  DeadlineTimer::Id handshake_timer_ = 0;
  WriteQueue writes_;

  Mutex mu_;
  int peer_rank_ ABSL_GUARDED_BY(mu_) = -1;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // requests not yet answered
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ServerStream> self_;
};

}  // namespace tessera::rpc
