#include "rpc/tensorpipe/tensorpipe_agent.h"

#include <signal.h>
#include <tensorpipe/tensorpipe.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/host_address.h"
#include "common/mutex.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/agent_support.h"
#include "rpc/auth/handshake.h"
#include "rpc/idle_connections.h"
#include "rpc/pending_calls.h"
#include "rpc/queue_limits.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/transport_choice.h"

namespace tessera::rpc {
namespace {

namespace tp = tensorpipe;

// A request on its way out, and its size for the bound on unsent bytes.
struct OutgoingRequest {
  std::shared_ptr<Message> message;
  uint64_t bytes = 0;
};

// One outgoing pipe: requests go out on it, their responses come back on it.
// Requests wait in `waiting` until the handshake is done.
struct ClientPipe {
  ClientPipe(auth::JobSecret secret, PeerIdentity self, std::atomic<int>* idle_count)
      : handshake(std::move(secret), std::move(self)), use(idle_count) {}

  uint64_t id = 0;
  int rank = -1;
  std::shared_ptr<tp::Pipe> pipe;
  ClientHandshake handshake;  // driven by the pipe's reads, one at a time
  bool proof_sent = false;    // likewise
  Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  bool failed ABSL_GUARDED_BY(mu) = false;
  absl::Status failure ABSL_GUARDED_BY(mu);  // why, once failed
  std::vector<OutgoingRequest> waiting ABSL_GUARDED_BY(mu);
  // Bytes of requests waiting or being written (Note [Bounded queues]).
  uint64_t unsent_bytes ABSL_GUARDED_BY(mu) = 0;
  ConnectionUse use;  // Note [Idle connections]
};

// One incoming pipe: a peer's requests come in, our responses go back. Its
// requests are served only after the handshake, as the identity it proved.
struct ServerPipe {
  explicit ServerPipe(auth::JobSecret secret) : handshake(std::move(secret)) {}

  std::shared_ptr<tp::Pipe> pipe;
  ServerHandshake handshake;  // driven by the pipe's reads, one at a time
  bool challenged = false;    // likewise
  // Set once the peer proved itself (under the agent's mu_): the identity
  // it claimed.
  std::optional<PeerIdentity> peer;
  // The rank its requests are served as (MemberRank); may change from -1 to
  // its rank when SetWorkers learns of a worker that joined.
  std::atomic<int> member_rank{-1};
  DeadlineTimer::Id handshake_timer = 0;
};

class TensorPipeAgent final : public RpcAgent {
 public:
  TensorPipeAgent(const TensorPipeOptions& options, const auth::JobSecret& secret, WorkerInfo self,
                  RequestHandler handler, Executor* executor, DeadlineTimer* timer)
      : options_(options),
        secret_(secret),
        self_(std::move(self)),
        handler_(std::move(handler)),
        executor_(executor),
        timer_(timer),
        admission_(options.queues.max_requests_in_service),
        context_(std::make_shared<tp::Context>(tp::ContextOptions().name(self_.name))),
        pending_(timer, [this](int rank) { return PeerAt(rank); }) {}

  ~TensorPipeAgent() override {
    Close(absl::CancelledError("RPC agent destroyed"));
  }

  absl::Status Start() {
    auto registered = RegisterTransports(*context_, options_, secret_);
    if (!registered.ok()) return registered.status();
    const std::string& tcp_name = registered->tcp_name;
    same_host_ = registered->same_host;
    std::vector<std::string> urls = {tcp_name + "://" + JoinHostPort(options_.listen_host, 0)};
    if (same_host_ != SameHostTransport::kTcp) urls.push_back(SameHostUrl(same_host_, self_.name));
    std::shared_ptr<tp::Listener> listener;
    try {
      listener = context_->listen(urls);
      // The advertised host with the bound port (GuardedTcpOptions).
      self_.address = listener->url(tcp_name);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", options_.listen_host, ": ", e.what()));
    }
    std::string host;
    int port = 0;
    SplitHostPort(self_.address, &host, &port);
    listen_url_ = tcp_name + "://" + JoinHostPort(options_.listen_host, port);
    self_.locality = absl::StrJoin(registered->locality, "\t");
    TESSERA_LOG(INFO) << self_.name << ": TensorPipe listening at " << listen_url_
                      << (self_.address != listen_url_ ? ", advertised as " + self_.address : "")
                      << "; transports: " << registered->transports
                      << "; channels: " << registered->channels;
    {
      MutexLock lock(&mu_);
      listener_ = listener;
    }
    Accept(listener);
    return absl::OkStatus();
  }

  const WorkerInfo& self() const override { return self_; }

  void SetWorkers(std::vector<WorkerInfo> workers) override;

  Future<Message> Send(int to_rank, Message request,
                       absl::Time deadline) override;

  AgentCounters counters() const override { return served_.Complete(pending_.Counts()); }

  void Close(const absl::Status& reason) override;

  void SetPeerFailureHandler(std::function<void(int rank)> handler) override {
    peer_failures_.Set(std::move(handler));
  }

 private:
  void Accept(std::shared_ptr<tp::Listener> listener);
  void Relisten();
  void ReadRequest(std::shared_ptr<ServerPipe> server);
  // Handles a handshake step; an error rejects the peer.
  absl::Status HandleServerHandshake(const std::shared_ptr<ServerPipe>& server,
                                     const Message& message);
  void RejectPeer(const std::shared_ptr<ServerPipe>& server, const absl::Status& why);
  void DropServerPipe(const std::shared_ptr<ServerPipe>& server);
  // Runs a request on the pool; `admitted`: it counts against admission_.
  void ServeRequest(std::shared_ptr<tp::Pipe> pipe, int from, Message request, bool admitted);
  // Answers request `request_id` with `why` instead of serving it.
  void Refuse(const std::shared_ptr<ServerPipe>& server, uint64_t request_id,
              const absl::Status& why);
  void ReadResponse(std::shared_ptr<ClientPipe> client);
  absl::Status HandleClientHandshake(const std::shared_ptr<ClientPipe>& client,
                                     const Message& message);
  void WriteRequest(const std::shared_ptr<ClientPipe>& client, std::shared_ptr<Message> request);
  // Writes a request counted in client->unsent_bytes; uncounts it once written.
  void WriteCounted(const std::shared_ptr<ClientPipe>& client, OutgoingRequest request);
  void FailPipe(const std::shared_ptr<ClientPipe>& client, const absl::Status& why,
                bool notify = true);
  // The pipe to `to_rank`, connected now if there is none; nullptr and
  // `error` if the agent is closed or the rank unknown.
  std::shared_ptr<ClientPipe> PipeTo(int to_rank, absl::Status* error);
  // Closes the least recently used idle pipes beyond the bound.
  void CloseIdlePipes();
  std::string PeerAt(int rank) const;  // with its address, for connection errors
  std::string PeerName(int rank) const;

  const TensorPipeOptions options_;
  const auth::JobSecret secret_;
  WorkerInfo self_;
  const RequestHandler handler_;
  Executor* const executor_;
  DeadlineTimer* const timer_;
  RequestAdmission admission_;  // Note [Bounded queues]
  std::shared_ptr<tp::Context> context_;
  std::shared_ptr<tp::Listener> listener_ ABSL_GUARDED_BY(mu_);  // see Relisten()
  std::string listen_url_;  // the TCP listener's; self_.address is what peers dial
  SameHostTransport same_host_ = SameHostTransport::kTcp;  // set by Start()
  const std::shared_ptr<BufferPool> buffers_ = BufferPool::Create();
  absl::Duration relisten_backoff_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(1);
  DeadlineTimer::Id relisten_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Serialises connecting (Note [One connect at a time]); never taken by
  // TensorPipe callbacks, so TensorPipe may be called under it.
  Mutex connect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<ClientPipe>> client_pipes_ ABSL_GUARDED_BY(mu_);
  std::set<std::shared_ptr<ServerPipe>> server_pipes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_pipe_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Client pipes with no call in flight (Note [Idle connections]).
  std::atomic<int> idle_pipes_{0};
  PendingCalls pending_;

  PeerFailureNotifier peer_failures_;

  ServedCounts served_;
};

std::string TensorPipeAgent::PeerAt(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorkerAt(rank, workers_);
}

std::string TensorPipeAgent::PeerName(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorker(rank, workers_);
}

Future<Message> TensorPipeAgent::Send(int to_rank, Message request,
                                      absl::Time deadline) {
  // No executor: the runtime's own continuation (decoding) runs inline on
  // the completing thread, and only the future it hands to user code posts
  // callbacks to the pool. That saves a thread hop per call.
  Promise<Message> promise;
  Future<Message> future = promise.GetFuture();
  std::shared_ptr<ClientPipe> client;
  do {
    absl::Status error;
    client = PipeTo(to_rank, &error);
    if (client == nullptr) {
      promise.Set(error);
      return future;
    }
  } while (!client->use.Claim());  // closing for idleness: take a new one
  const uint64_t request_id = pending_.Add(promise, to_rank, client->id,
                                           request.envelope.target(), deadline);
  StampRequest(request_id, self_.rank, deadline, &request.envelope);
  WriteRequest(client, std::make_shared<Message>(std::move(request)));
  return future;
}

std::shared_ptr<ClientPipe> TensorPipeAgent::PipeTo(int to_rank, absl::Status* error) {
  // Note [No TensorPipe calls under mu_]: TensorPipe may run our callbacks
  // inline in the calling thread (e.g. a connect refused at once), and they
  // take mu_; so pipes are connected and read outside the lock.
  std::shared_ptr<ClientPipe> client;
  std::string address, peer_name, transport;
  {
    MutexLock lock(&mu_);
    if (closed_) {
      *error = absl::FailedPreconditionError("RPC agent of '" + self_.name + "' is shut down");
      return nullptr;
    }
    if (to_rank < 0 || to_rank >= static_cast<int>(workers_.size())) {
      *error = absl::InvalidArgumentError(
          absl::StrCat("no worker with rank ", to_rank, " (world size ", workers_.size(), ")"));
      return nullptr;
    }
    auto it = client_pipes_.find(to_rank);
    if (it != client_pipes_.end()) return it->second;
    address = workers_[to_rank].address;
    peer_name = workers_[to_rank].name;
    // For the log line of a new connection only: not on every call.
    transport = TransportFor(self_, workers_[to_rank]);
  }
  // Note [One connect at a time]: two threads connecting to one peer at
  // once would leave a second pipe to close mid-handshake — and TensorPipe
  // fails the peer's whole listener for that (Note [Listener restart]),
  // breaking the handshake of the pipe we keep too. So threads connect one
  // at a time, and a thread that waited here finds the pipe made.
  MutexLock connect_lock(&connect_mu_);
  {
    MutexLock lock(&mu_);
    auto it = client_pipes_.find(to_rank);
    if (it != client_pipes_.end()) return it->second;
  }
  TESSERA_LOG(INFO) << self_.name << ": connecting to '" << peer_name << "' (rank " << to_rank
                    << ") at " << address << ": " << transport;
  client = std::make_shared<ClientPipe>(
      secret_, PeerIdentity{self_.name, self_.rank, self_.incarnation}, &idle_pipes_);
  client->rank = to_rank;
  client->pipe = context_->connect(address, tp::PipeOptions().remoteName(peer_name));
  {
    MutexLock lock(&mu_);
    client->id = next_pipe_id_++;
    client_pipes_[to_rank] = client;
  }
  auto hello = std::make_shared<Message>();
  hello->envelope = client->handshake.Hello();
  WriteMessage(client->pipe, std::move(hello), [this, client](const tp::Error& error) {
    if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
  });
  ReadResponse(client);
  return client;
}

void TensorPipeAgent::CloseIdlePipes() {
  std::vector<std::shared_ptr<ClientPipe>> closing;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closing = TakeIdleBeyond(client_pipes_, options_.max_idle_connections);
  }
  for (const auto& client : closing) {
    TESSERA_LOG(DEBUG) << self_.name << ": closing the idle connection to rank " << client->rank
                       << " (more than " << options_.max_idle_connections << " idle)";
    auto goodbye = std::make_shared<Message>();
    goodbye->envelope.set_kind(proto::GOODBYE);
    // The callee closes the pipe on reading it; then our read ends.
    WriteMessage(client->pipe, std::move(goodbye), [this, client](const tp::Error& error) {
      if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
    });
  }
}

void TensorPipeAgent::SetWorkers(std::vector<WorkerInfo> workers) {
  std::vector<std::shared_ptr<ClientPipe>> stale;
  {
    MutexLock lock(&mu_);
    for (const auto& [rank, client] : client_pipes_) {
      if (rank >= static_cast<int>(workers.size()) ||
          workers[rank].address != workers_[rank].address) {
        stale.push_back(client);
      }
    }
    workers_ = std::move(workers);
    for (const auto& server : server_pipes_) {
      if (server->peer.has_value()) {
        server->member_rank = MemberRank(server->peer->name, server->peer->rank,
                                         server->peer->incarnation, workers_);
      }
    }
  }
  // A pipe to a rank's old incarnation: the rank itself is not failing
  // (its new incarnation is there), so no failure notice.
  for (const auto& client : stale) {
    FailPipe(client, absl::UnavailableError("the worker restarted at a new address"),
             /*notify=*/false);
  }
}

void TensorPipeAgent::WriteRequest(const std::shared_ptr<ClientPipe>& client,
                                   std::shared_ptr<Message> request) {
  const uint64_t request_id = request->envelope.request_id();
  OutgoingRequest outgoing{std::move(request), 0};
  outgoing.bytes = MessageBytes(*outgoing.message);
  const uint64_t limit = options_.queues.max_unsent_bytes_per_peer;
  bool failed = false;
  absl::Status failure;
  absl::Status refused;
  {
    MutexLock lock(&client->mu);
    failed = client->failed;
    failure = client->failure;
    if (!failed && !FitsUnsentBytes(client->unsent_bytes, outgoing.bytes, limit)) {
      refused = UnsentBytesExhausted(client->unsent_bytes, outgoing.bytes, limit, self_.name);
    } else if (!failed) {
      client->unsent_bytes += outgoing.bytes;
      // Until the peer accepted us, requests wait (in order) for the handshake.
      if (!client->ready) {
        client->waiting.push_back(std::move(outgoing));
        return;
      }
    }
  }
  if (failed) {
    // The pipe broke before this call was registered on it.
    pending_.Complete(request_id, ConnectionEnded(PeerAt(client->rank), failure));
    return;
  }
  if (!refused.ok()) {
    pending_.Complete(request_id,
                      absl::Status(refused.code(), absl::StrCat("call to worker ",
                                                                PeerName(client->rank),
                                                                " not sent: ", refused.message())));
    // No answer will come to release the pipe.
    if (client->use.Release() && idle_pipes_.load() > options_.max_idle_connections) {
      CloseIdlePipes();
    }
    return;
  }
  WriteCounted(client, std::move(outgoing));
}

void TensorPipeAgent::WriteCounted(const std::shared_ptr<ClientPipe>& client,
                                   OutgoingRequest request) {
  WriteMessage(client->pipe, std::move(request.message),
               [this, client, bytes = request.bytes](const tp::Error& error) {
                 {
                   MutexLock lock(&client->mu);
                   client->unsent_bytes -= bytes;
                 }
                 if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
               });
}

void TensorPipeAgent::FailPipe(const std::shared_ptr<ClientPipe>& client, const absl::Status& why,
                               bool notify) {
  {
    MutexLock lock(&mu_);
    auto it = client_pipes_.find(client->rank);
    // Forget the broken pipe, so the next call reconnects.
    if (it != client_pipes_.end() && it->second == client) client_pipes_.erase(it);
  }
  {
    MutexLock lock(&client->mu);
    if (client->failed) return;  // both a read and a write may report it
    client->failed = true;
    client->failure = why;
    client->waiting.clear();
  }
  client->use.Ended();
  const bool said_goodbye = client->use.closing();
  // After our GOODBYE the pipe's end is expected (Note [Idle connections]).
  if (notify && !said_goodbye) peer_failures_.Notify(client->rank);
  const absl::Status status = ConnectionEnded(PeerAt(client->rank), why);
  pending_.FailConnectionAndWarn(client->id, status, self_.name, /*warn=*/!said_goodbye);
  client->pipe->close();
}

void TensorPipeAgent::ReadResponse(std::shared_ptr<ClientPipe> client) {
  ReadFrame(client->pipe, options_.limits, buffers_.get(), [this, client](absl::StatusOr<Message> message) {
    if (!message.ok()) {
      FailPipe(client, message.status());
      return;
    }
    bool ready = false;
    {
      MutexLock lock(&client->mu);
      ready = client->ready;
    }
    if (!ready) {
      auto status = HandleClientHandshake(client, *message);
      if (!status.ok()) {
        FailPipe(client, status);
        return;
      }
    } else if (message->envelope.kind() != proto::RESPONSE) {
      FailPipe(client, absl::InvalidArgumentError("peer sent a non-response on a client pipe"));
      return;
    } else {
      const uint64_t id = message->envelope.request_id();
      pending_.Complete(id, *std::move(message));
      if (client->use.Release() && idle_pipes_.load() > options_.max_idle_connections) {
        CloseIdlePipes();
      }
    }
    ReadResponse(client);
  });
}

absl::Status TensorPipeAgent::HandleClientHandshake(const std::shared_ptr<ClientPipe>& client,
                                                    const Message& message) {
  if (!client->proof_sent) {
    auto proof = client->handshake.OnChallenge(message.envelope);
    if (!proof.ok()) return proof.status();
    auto reply = std::make_shared<Message>();
    reply->envelope = *std::move(proof);
    client->proof_sent = true;
    WriteMessage(client->pipe, std::move(reply), [this, client](const tp::Error& error) {
      if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
    });
    return absl::OkStatus();
  }
  TESSERA_RETURN_IF_ERROR(client->handshake.OnResult(message.envelope));
  // Written outside the lock (Note [No TensorPipe calls under mu_]); until
  // `ready`, new requests join `waiting` behind these, so the order of
  // calls on the pipe is kept.
  while (true) {
    std::vector<OutgoingRequest> batch;
    {
      MutexLock lock(&client->mu);
      if (client->waiting.empty()) {
        client->ready = true;
        break;
      }
      batch.swap(client->waiting);
    }
    for (auto& request : batch) WriteCounted(client, std::move(request));
  }
  return absl::OkStatus();
}

void TensorPipeAgent::Accept(std::shared_ptr<tp::Listener> listener) {
  listener->accept([this, listener](const tp::Error& error,
                                    std::shared_ptr<tp::Pipe> pipe) {
    if (error) {
      // Note [Listener restart]: TensorPipe fails its whole listener when one
      // incoming connection breaks before its hello (a port scan, garbage,
      // a peer dying mid-handshake). Established pipes are unaffected, but
      // nobody new could connect, so we listen again on the same address.
      MutexLock lock(&mu_);
      if (closed_) return;
      TESSERA_LOG(WARNING) << self_.name << ": listener failed ("
                           << error.what() << "); listening again at "
                           << self_.address << " in " << relisten_backoff_;
      relisten_timer_ = timer_->Schedule(absl::Now() + relisten_backoff_, [this] { Relisten(); });
      relisten_backoff_ = std::min(relisten_backoff_ * 2, absl::Seconds(1));
      return;
    }
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      relisten_backoff_ = absl::Milliseconds(1);
    }
    auto server = std::make_shared<ServerPipe>(secret_);
    server->pipe = pipe;
    // A peer that connects and never proves itself is cut off.
    std::weak_ptr<ServerPipe> weak = server;
    server->handshake_timer = timer_->Schedule(
        absl::Now() + options_.handshake_timeout, [this, weak] {
          auto expired = weak.lock();
          if (expired == nullptr || expired->peer.has_value()) return;
          RejectPeer(expired, absl::UnauthenticatedError(absl::StrCat(
                                  "no connection handshake within ",
                                  absl::FormatDuration(options_.handshake_timeout))));
        });
    {
      MutexLock lock(&mu_);
      if (closed_) return;
      server_pipes_.insert(server);
    }
    ReadRequest(server);
    Accept(listener);
  });
}

void TensorPipeAgent::Relisten() {
  std::vector<std::string> urls;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    urls.push_back(listen_url_);
  }
  if (same_host_ != SameHostTransport::kTcp) urls.push_back(SameHostUrl(same_host_, self_.name));
  std::shared_ptr<tp::Listener> listener;
  try {
    listener = context_->listen(urls);  // see Note [No TensorPipe calls under mu_]
  } catch (const std::exception& e) {
    MutexLock lock(&mu_);
    TESSERA_LOG(WARNING) << self_.name << ": listening again failed: " << e.what();
    relisten_timer_ = timer_->Schedule(absl::Now() + relisten_backoff_, [this] { Relisten(); });
    relisten_backoff_ = std::min(relisten_backoff_ * 2, absl::Seconds(1));
    return;
  }
  {
    MutexLock lock(&mu_);
    listener_ = listener;
  }
  Accept(listener);
}

void TensorPipeAgent::ReadRequest(std::shared_ptr<ServerPipe> server) {
  ReadFrame(server->pipe, options_.limits, buffers_.get(), [this, server](absl::StatusOr<Message> message) {
    if (!message.ok()) {
      if (message.status().code() == absl::StatusCode::kUnavailable) {
        TESSERA_LOG(DEBUG) << self_.name << ": incoming connection ended: " << message.status();
        if (server->peer.has_value()) peer_failures_.Notify(server->member_rank.load());
      } else {
        TESSERA_LOG(WARNING) << self_.name << ": closing incoming connection: bad frame: "
                             << message.status().message();
      }
      DropServerPipe(server);
      return;
    }
    if (!server->peer.has_value()) {
      auto status = HandleServerHandshake(server, *message);
      if (!status.ok()) {
        RejectPeer(server, status);
        return;
      }
      ReadRequest(server);
      return;
    }
    const auto kind = message->envelope.kind();
    if (kind == proto::GOODBYE) {
      // The caller closes an idle pipe: not a failure (Note [Idle
      // connections], rpc/idle_connections.h).
      TESSERA_LOG(DEBUG) << self_.name << ": rank " << server->member_rank.load()
                         << " closed an idle connection";
      DropServerPipe(server);
      return;
    }
    if (kind != proto::CALL && kind != proto::INTERNAL_CALL) {
      TESSERA_LOG(WARNING) << self_.name << ": closing incoming connection: expected a request, "
                           << "got message kind " << kind;
      DropServerPipe(server);
      return;
    }
    served_.RequestReceived();
    // The identity the peer proved, not what the envelope claims.
    const int from = server->member_rank.load();
    if (from == kStaleIncarnation) {
      // Answered, not served: the stale process learns why.
      const PeerIdentity& peer = *server->peer;
      Refuse(server, message->envelope.request_id(),
             StaleIncarnationError(peer.name, peer.rank, peer.incarnation, self_.name));
      ReadRequest(server);
      return;
    }
    const bool admitted = kind == proto::CALL;  // internal calls are never refused
    if (admitted && !admission_.TryAdmit()) {
      Refuse(server, message->envelope.request_id(), admission_.Refusal(self_.name));
      ReadRequest(server);
      return;
    }
    message->envelope.set_origin_rank(from);
    executor_->Post(
        [this, pipe = server->pipe, from, admitted, request = *std::move(message)]() mutable {
          ServeRequest(pipe, from, std::move(request), admitted);
        });
    ReadRequest(server);
  });
}

absl::Status TensorPipeAgent::HandleServerHandshake(const std::shared_ptr<ServerPipe>& server,
                                                    const Message& message) {
  auto reply = std::make_shared<Message>();
  if (!server->challenged) {
    auto challenge = server->handshake.OnHello(message.envelope);
    if (!challenge.ok()) return challenge.status();
    reply->envelope = *std::move(challenge);
    server->challenged = true;
  } else {
    auto peer = server->handshake.OnProof(message.envelope);
    if (!peer.ok()) return peer.status();
    timer_->Cancel(server->handshake_timer);
    {
      MutexLock lock(&mu_);
      const int member_rank = MemberRank(peer->name, peer->rank, peer->incarnation, workers_);
      if (member_rank == kStaleIncarnation) {
        return StaleIncarnationError(peer->name, peer->rank, peer->incarnation, self_.name);
      }
      server->member_rank = member_rank;
      server->peer = *std::move(peer);
    }
    reply->envelope = ServerHandshake::Accepted();
  }
  WriteMessage(server->pipe, std::move(reply), [](const tp::Error&) {});
  return absl::OkStatus();
}

void TensorPipeAgent::RejectPeer(const std::shared_ptr<ServerPipe>& server,
                                 const absl::Status& why) {
  TESSERA_LOG(WARNING) << self_.name << ": refused a connection: " << why.message();
  auto rejection = std::make_shared<Message>();
  rejection->envelope = ServerHandshake::Rejected(why, self_.name);
  // Closed once the peer has the reason (or the write failed).
  WriteMessage(server->pipe, std::move(rejection),
               [this, server](const tp::Error&) { DropServerPipe(server); });
}

void TensorPipeAgent::DropServerPipe(const std::shared_ptr<ServerPipe>& server) {
  timer_->Cancel(server->handshake_timer);
  server->pipe->close();
  MutexLock lock(&mu_);
  server_pipes_.erase(server);
}

void TensorPipeAgent::Refuse(const std::shared_ptr<ServerPipe>& server, uint64_t request_id,
                             const absl::Status& why) {
  auto refusal = std::make_shared<Message>(ResponseTo(request_id, why, self_.name, self_.rank));
  WriteMessage(server->pipe, std::move(refusal),
               [this](const tp::Error&) { served_.ResponseSent(); });
}

void TensorPipeAgent::ServeRequest(std::shared_ptr<tp::Pipe> pipe, int from, Message request,
                                   bool admitted) {
  const uint64_t request_id = request.envelope.request_id();
  handler_(from, std::move(request))
      .OnReady([this, pipe, request_id, admitted](const absl::StatusOr<Message>& result) {
        if (admitted) admission_.Finished();
        auto response = std::make_shared<Message>(
            ResponseTo(request_id, result, self_.name, self_.rank));
        WriteMessage(pipe, std::move(response), [this](const tp::Error& error) {
          if (error) {
            TESSERA_LOG(DEBUG) << self_.name << ": response not delivered: "
                               << error.what();
          }
          served_.ResponseSent();
        });
      });
}

void TensorPipeAgent::Close(const absl::Status& reason) {
  DeadlineTimer::Id relisten_timer = 0;
  std::set<std::shared_ptr<ServerPipe>> server_pipes;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    peer_failures_.Close();
    relisten_timer = relisten_timer_;
    server_pipes = server_pipes_;
  }
  // Cancel() waits for a callback under way, so none touches `this` later.
  timer_->Cancel(relisten_timer);
  for (const auto& server : server_pipes) timer_->Cancel(server->handshake_timer);
  pending_.FailAll(reason);
  context_->close();
  context_->join();
  MutexLock lock(&mu_);
  client_pipes_.clear();
  server_pipes_.clear();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcAgent>> CreateTensorPipeAgent(
    const TensorPipeOptions& options, const auth::JobSecret& secret, const std::string& name,
    int rank, int incarnation, RequestHandler handler, Executor* executor, DeadlineTimer* timer) {
  // TensorPipe's shm transport writes to Unix sockets without MSG_NOSIGNAL:
  // a peer dying mid-handshake would kill this process with SIGPIPE. Ignore
  // it, unless the application installed its own handler.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  WorkerInfo self;
  self.name = name;
  self.rank = rank;
  self.incarnation = incarnation;
  auto agent = std::make_unique<TensorPipeAgent>(options, secret, std::move(self),
                                                 std::move(handler), executor, timer);
  auto status = agent->Start();
  if (!status.ok()) return status;
  return std::unique_ptr<RpcAgent>(std::move(agent));
}

}  // namespace tessera::rpc
