// The TensorPipe agent (tensorpipe_agent_impl.h): its set-up — transports
// and listener, the worker table, accepting pipes (and listening again when
// TensorPipe fails its listener), closing; the calls it sends on the pipes
// it opens; and the factory.

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/broken_pipe.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/tensorpipe_agent_impl.h"

namespace tessera::rpc {

absl::Status TensorPipeAgent::Start(const AgentSetup& setup) {
  TESSERA_ASSIGN_OR_RETURN(auto registered, RegisterTransports(*context_, setup));
  const std::string& tcp_name = registered.tcp_name;
  same_host_ = registered.same_host;
  inbox_ = std::move(registered.inbox);
  incoming_.SetInbox(inbox_.get());
  std::vector<std::string> urls = {tcp_name + "://" + JoinHostPort(host_.bind, 0)};
  if (same_host_ != SameHostTransport::kTcp) urls.push_back(SameHostUrl(same_host_, self_.name));
  std::shared_ptr<tp::Listener> listener;
  try {
    listener = context_->listen(urls);
    // The advertised host with the bound port (GuardedTcpOptions).
    self_.address = listener->url(tcp_name);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", host_.bind, ": ", e.what()));
  }
  std::string host;
  int port = 0;
  SplitHostPort(self_.address, &host, &port);
  listen_url_ = tcp_name + "://" + JoinHostPort(host_.bind, port);
  self_.locality = absl::StrJoin(registered.locality, "\t");
  TESSERA_LOG(INFO) << self_.name << ": TensorPipe listening at " << listen_url_
                    << (self_.address != listen_url_ ? ", advertised as " + self_.address : "")
                    << "; transports: " << registered.transports
                    << "; channels: " << registered.channels;
  {
    MutexLock lock(&mu_);
    listener_ = listener;
  }
  Accept(listener);
  return absl::OkStatus();
}

std::string TensorPipeAgent::PeerAt(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorkerAt(rank, workers_);
}

std::string TensorPipeAgent::PeerName(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorker(rank, workers_);
}

SharedMemoryRoute TensorPipeAgent::RouteFor(int rank, const Message& message) const {
  if (inbox_ == nullptr) return {};
  const uint64_t shared_bytes = BytesInSharedMemory(message);
  if (shared_bytes == 0) return {};
  MutexLock lock(&mu_);
  if (rank < 0 || rank >= static_cast<int>(workers_.size())) return {};
  std::string peer_inbox = SharedMemoryInboxOf(self_, workers_[rank]);
  if (peer_inbox.empty()) return {};
  return SharedMemoryRoute{inbox_.get(), std::move(peer_inbox), shared_bytes};
}

void TensorPipeAgent::SetWorkers(std::vector<WorkerInfo> workers) {
  incoming_.SetWorkers(workers);
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
  }
  // A pipe to a rank's old incarnation: the rank itself is not failing
  // (its new incarnation is there), so no failure notice.
  for (const auto& client : stale) {
    FailPipe(client, absl::UnavailableError("the worker restarted at a new address"),
             /*notify=*/false);
  }
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
    incoming_.Accept(std::move(pipe));
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

void TensorPipeAgent::Close(const absl::Status& reason) {
  DeadlineTimer::Id relisten_timer = 0;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    peer_failures_.Close();
    relisten_timer = relisten_timer_;
  }
  // Cancel() waits for a callback under way, so none touches `this` later.
  timer_->Cancel(relisten_timer);
  incoming_.Close();
  pending_.FailAll(reason);
  context_->close();
  context_->join();
  incoming_.Clear();
  MutexLock lock(&mu_);
  client_pipes_.clear();
}

// ---------------------------------------------------------------- calls sent

Future<Message> TensorPipeAgent::Send(int to_rank, Message request, absl::Time deadline) {
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
  const uint64_t request_id =
      pending_.Add(promise, to_rank, client->id, request.envelope.target(), deadline);
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
  // fails the peer's whole listener for that (see Note [Listener restart]),
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

void TensorPipeAgent::CallEnded(const std::shared_ptr<ClientPipe>& client) {
  if (client->use.Release() && idle_pipes_.load() > max_idle_connections_) {
    CloseIdlePipes();
  }
}

void TensorPipeAgent::CloseIdlePipes() {
  std::vector<std::shared_ptr<ClientPipe>> closing;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closing = TakeIdleBeyond(client_pipes_, max_idle_connections_);
  }
  for (const auto& client : closing) {
    TESSERA_LOG(DEBUG) << self_.name << ": closing the idle connection to rank " << client->rank
                       << " (more than " << max_idle_connections_ << " idle)";
    auto goodbye = std::make_shared<Message>();
    goodbye->envelope.set_kind(proto::GOODBYE);
    // The callee closes the pipe on reading it; then our read ends.
    WriteMessage(client->pipe, std::move(goodbye), [this, client](const tp::Error& error) {
      if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
    });
  }
}

void TensorPipeAgent::WriteRequest(const std::shared_ptr<ClientPipe>& client,
                                   std::shared_ptr<Message> request) {
  const uint64_t request_id = request->envelope.request_id();
  OutgoingRequest outgoing{std::move(request), 0, {}};
  outgoing.route = RouteFor(client->rank, *outgoing.message);
  outgoing.bytes = MessageBytes(*outgoing.message) - outgoing.route.shared_bytes;
  const uint64_t limit = queues_.max_unsent_bytes_per_peer;
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
    pending_.Complete(
        request_id,
        absl::Status(refused.code(), absl::StrCat("call to worker ", PeerName(client->rank),
                                                  " not sent: ", refused.message())));
    CallEnded(client);  // no answer will come to end it
    return;
  }
  WriteCounted(client, std::move(outgoing));
}

void TensorPipeAgent::WriteCounted(const std::shared_ptr<ClientPipe>& client,
                                   OutgoingRequest request) {
  WriteMessage(
      client->pipe, std::move(request.message),
      [this, client, bytes = request.bytes](const tp::Error& error) {
        {
          MutexLock lock(&client->mu);
          client->unsent_bytes -= bytes;
        }
        if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
      },
      request.route);
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
  // After our GOODBYE the pipe's end is expected (see Note [Idle connections]).
  if (notify && !said_goodbye) peer_failures_.Notify(client->rank);
  const absl::Status status = ConnectionEnded(PeerAt(client->rank), why);
  pending_.FailConnectionAndWarn(client->id, status, self_.name, /*warn=*/!said_goodbye);
  client->pipe->close();
}

void TensorPipeAgent::ReadResponse(std::shared_ptr<ClientPipe> client) {
  bool handshake_done = false;
  {
    MutexLock lock(&client->mu);
    handshake_done = client->ready;
  }
  // Tensors in shared memory only from a peer that proved the job secret.
  FdInbox* inbox = handshake_done ? inbox_.get() : nullptr;
  ReadFrame(client->pipe, limits_, buffers_.get(), inbox,
            [this, client](absl::StatusOr<Message> message) {
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
                FailPipe(client,
                         absl::InvalidArgumentError("peer sent a non-response on a client pipe"));
                return;
              } else {
                const uint64_t id = message->envelope.request_id();
                pending_.Complete(id, *std::move(message));
                CallEnded(client);
              }
              ReadResponse(client);
            });
}

absl::Status TensorPipeAgent::HandleClientHandshake(const std::shared_ptr<ClientPipe>& client,
                                                    const Message& message) {
  if (!client->proof_sent) {
    TESSERA_ASSIGN_OR_RETURN(auto proof, client->handshake.OnChallenge(message.envelope));
    auto reply = std::make_shared<Message>();
    reply->envelope = std::move(proof);
    client->proof_sent = true;
    WriteMessage(client->pipe, std::move(reply), [this, client](const tp::Error& error) {
      if (error) FailPipe(client, StatusFromPipeError(error, "write failed: "));
    });
    return absl::OkStatus();
  }
  TESSERA_RETURN_IF_ERROR(client->handshake.OnResult(message.envelope));
  // Written outside the lock (see Note [No TensorPipe calls under mu_]); until
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

// ---------------------------------------------------------------- the factory

absl::StatusOr<std::unique_ptr<RpcAgent>> CreateTensorPipeAgent(AgentSetup setup) {
  // TensorPipe's shm transport writes to Unix sockets without MSG_NOSIGNAL
  // (see Note [SIGPIPE]).
  IgnoreBrokenPipeSignals();
  // Not moved into the agent: Start reads `setup` too (a moved-from one
  // once advertised the wildcard it listened on instead of the host's
  // address).
  auto agent = std::make_unique<TensorPipeAgent>(setup);
  auto status = agent->Start(setup);
  if (!status.ok()) return status;
  return std::unique_ptr<RpcAgent>(std::move(agent));
}

}  // namespace tessera::rpc
