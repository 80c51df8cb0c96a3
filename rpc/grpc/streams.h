// The two ends of a gRPC agent's connection: ClientStream, the stream this
// worker opened to a peer (its requests out, their responses back), and
// ServerStream, a stream a peer opened to us (its requests in, our
// responses out). Each runs the connection handshake (rpc/auth/) before
// anything else and reports to its StreamHost, the agent.
//
// Both run on the agent's CompletionLoop (rpc/grpc/async_bidi.h).
//
// Lifetime: a stream owns itself (self_) from Start()/Listen() until OnDone,
// after which gRPC never touches it; others hold shared_ptrs to write to it
// later, which then become no-ops.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "common/deadline_timer.h"
#include "common/metrics.h"
#include "rpc/auth/handshake.h"
#include "rpc/buffer_pool.h"
#include "rpc/codec.h"
#include "rpc/grpc/async_bidi.h"
#include "rpc/grpc/health.h"
#include "rpc/grpc/write_queue.h"
#include "rpc/idle_connections.h"
#include "rpc/message.h"

namespace tessera::rpc {

class ClientStream;
class ServerStream;

struct StreamSettings {
  PeerIdentity self;
  auth::JobSecret secret;
  CodecLimits limits;
  size_t max_message_bytes = 0;
  uint64_t max_unsent_bytes = 0;  // QueueLimits::max_unsent_bytes_per_peer
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
  // A client stream was left with no call in flight (see Note [Idle
  // connections], rpc/idle_connections.h).
  virtual void OnClientStreamIdle() = 0;
  // Client stream `stream` ended; `why` fails the calls still on it.
  virtual void OnClientStreamDone(ClientStream* stream, const absl::Status& why) = 0;
  // An authenticated peer's request arrived; answer with stream->Respond().
  virtual void OnRequest(std::shared_ptr<ServerStream> stream, int from_rank,
                         Message request) = 0;
  // A peer's call arrived at the stream listening for one: listen for the next.
  virtual void ListenForNextStream() = 0;
  // What grpc.health.v1 reports: SERVING (true) or NOT_SERVING.
  virtual bool serving() const = 0;
  // The rank to serve an authenticated peer as (rpc_agent.h's MemberRank).
  virtual int MemberRankOf(const PeerIdentity& peer) const = 0;
  // Changes whenever the worker table does: a stream asks MemberRankOf again
  // only then, not on every request (a peer may have joined, or been
  // replaced by a newer incarnation: see Note [Fencing stale incarnations]).
  virtual uint64_t WorkersVersion() const = 0;
  // A server stream ended (or, listening, saw the server shut down);
  // `peer_rank` is -1 unless a worker of the job. `said_goodbye`: the peer
  // closed it for idleness, which is not its failure.
  virtual void OnServerStreamDone(int peer_rank, const absl::Status& why, bool said_goodbye) = 0;
};

class ClientStream final : public AsyncClientBidi,
                           public std::enable_shared_from_this<ClientStream> {
 public:
  // `idle_count`: the host's count of idle client streams (ConnectionUse).
  ClientStream(StreamHost* host, uint64_t id, int peer_rank, std::atomic<int>* idle_count);

  // Opens the stream on `queue` and sends the handshake's hello.
  void Start(grpc::GenericStub* stub, const std::string& method, grpc::CompletionQueue* queue);
  // Queues a request (written once the handshake is done). An error if the
  // stream is ending, the frame is too large or would pass the bound on
  // unsent bytes (see Note [Bounded queues]); nothing was sent then.
  absl::Status Send(const Message& request);
  // Ends the stream; OnDone follows.
  void Cancel() { context().TryCancel(); }
  // Asks the peer to end the stream, which use.CloseIfIdle() closed: its
  // end is then no failure on either side (see Note [Idle connections]).
  void SayGoodbye();

  ConnectionUse use;  // calls in flight

  uint64_t id() const { return id_; }
  int peer_rank() const { return peer_rank_; }

 private:
  void OnOpened() override;
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

  void Write(grpc::ByteBuffer frame);
  absl::Status HandleHandshake(const Message& message);
  void Fail(const absl::Status& why);

  StreamHost* const host_;
  const uint64_t id_;
  const int peer_rank_;
  ClientHandshake handshake_;
  grpc::ByteBuffer read_buffer_;  // touched only by read reactions
  enum class Phase { kChallenge, kResult, kReady } phase_ = Phase::kChallenge;
  WriteQueue writes_;

  Mutex mu_;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<grpc::ByteBuffer> before_ready_ ABSL_GUARDED_BY(mu_);
  uint64_t before_ready_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failure_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ClientStream> self_;
  metrics::OpenConnection counted_;
};

class ServerStream final : public AsyncServerBidi,
                           public std::enable_shared_from_this<ServerStream> {
 public:
  explicit ServerStream(StreamHost* host);

  // Waits for a peer's call (call once, right after construction); when it
  // arrives, asks the host to listen for the next and reads the handshake.
  void Listen(grpc::AsyncGenericService* service, grpc::ServerCompletionQueue* queue);
  // Sends the response to a request from OnRequest (any thread).
  void Respond(const Message& response);

 private:
  void OnArrived(bool ok) override;
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

  void Start();
  absl::Status HandleHandshake(const Message& message);
  // A frame after the handshake: a request (served), a goodbye or garbage
  // (the stream finishes). False when no further read is to start.
  bool OnRequestFrame(Message message);
  void AnswerHealthProbe();
  void Write(grpc::ByteBuffer frame);
  // Finishes with `status` once the write in flight (if any) is done.
  void FinishSoon(const grpc::Status& status);
  void FinishIfDrained();

  StreamHost* const host_;
  ServerHandshake handshake_;
  grpc::ByteBuffer read_buffer_;  // touched only by read reactions
  // kHealth: the call is a grpc.health.v1 probe, not a peer's stream.
  enum class Phase { kHello, kProof, kReady, kHealth } phase_ = Phase::kHello;
  HealthMethod health_ = HealthMethod::kNone;
  DeadlineTimer::Id handshake_timer_ = 0;
  std::optional<PeerIdentity> peer_;  // the identity it proved; read reactions only
  uint64_t checked_version_ = 0;      // the WorkersVersion peer_rank_ is from; ditto
  WriteQueue writes_;

  Mutex mu_;
  int peer_rank_ ABSL_GUARDED_BY(mu_) = -1;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // requests not yet answered
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool said_goodbye_ ABSL_GUARDED_BY(mu_) = false;  // the peer's GOODBYE came
  std::optional<grpc::Status> finish_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status why_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<ServerStream> self_;
  std::optional<metrics::OpenConnection> counted_;  // once a peer's stream arrived
};

}  // namespace tessera::rpc
