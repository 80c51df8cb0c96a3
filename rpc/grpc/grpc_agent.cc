#include "rpc/grpc/grpc_agent.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/grpc_logging.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/status.h"
#include "proto/worker_service.pb.h"
#include "rpc/agent_support.h"
#include "rpc/grpc/completion_loop.h"
#include "rpc/grpc/streams.h"
#include "rpc/pending_calls.h"

namespace tessera::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the TLS ", what, " '", path, "'"));
  std::ostringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

struct TlsMaterial {
  std::string cert_chain, private_key, root_certs;
};

absl::StatusOr<TlsMaterial> LoadTls(const GrpcTlsOptions& tls) {
  TlsMaterial material;
  TESSERA_ASSIGN_OR_RETURN(auto cert, ReadPem(tls.cert_chain_file, "certificate chain"));
  TESSERA_ASSIGN_OR_RETURN(auto key, ReadPem(tls.private_key_file, "private key"));
  TESSERA_ASSIGN_OR_RETURN(auto roots, ReadPem(tls.root_certs_file, "root certificates"));
  return TlsMaterial{cert, key, roots};
}

}  // namespace

void PrepareProcessForGrpcAgent() { setenv("GRPC_POLL_STRATEGY", "poll", /*overwrite=*/0); }

namespace {

class GrpcAgent final : public RpcAgent, public StreamHost {
 public:
  explicit GrpcAgent(AgentSetup setup)
      : options_(setup.options->grpc),
        host_(setup.host),
        max_idle_connections_(setup.options->max_idle_connections),
        self_(std::move(setup.self)),
        timer_(setup.timer),
        requests_(std::move(setup.handler), setup.executor,
                  setup.options->queues.max_requests_in_service, self_.name, self_.rank),
        pending_(timer_, [this](int rank) { return PeerAt(rank); }) {
    settings_.self = PeerIdentity{self_.name, self_.rank, self_.incarnation};
    settings_.secret = setup.options->job_secret;
    settings_.limits = setup.options->limits;
    settings_.max_message_bytes = options_.max_message_bytes;
    settings_.max_unsent_bytes = setup.options->queues.max_unsent_bytes_per_peer;
    settings_.handshake_timeout = options_.handshake_timeout;
  }

  ~GrpcAgent() override { Close(absl::CancelledError("RPC agent destroyed")); }

  absl::Status Start();

  // RpcAgent
  const WorkerInfo& self() const override { return self_; }
  void SetWorkers(std::vector<WorkerInfo> workers) override {
    MutexLock lock(&mu_);
    for (int rank = 0; rank < static_cast<int>(workers_.size()); ++rank) {
      if (rank < static_cast<int>(workers.size()) &&
          workers[rank].address == workers_[rank].address) {
        continue;
      }
      // A rank that restarted elsewhere: the next call dials the new
      // address; the old stream ends on its own, without a failure notice.
      stubs_.erase(rank);
      streams_.erase(rank);
    }
    workers_ = std::move(workers);
    workers_version_.fetch_add(1);
  }
  Future<Message> Send(int to_rank, Message request, absl::Time deadline) override;
  AgentCounters counters() const override { return served_.Complete(pending_.Counts()); }
  void SetPeerFailureHandler(std::function<void(int rank)> handler) override {
    peer_failures_.Set(std::move(handler));
  }
  void Close(const absl::Status& reason) override;

  // StreamHost
  const StreamSettings& settings() const override { return settings_; }
  BufferPool* buffers() override { return buffers_.get(); }
  DeadlineTimer* timer() override { return timer_; }
  void OnResponse(Message response) override {
    const uint64_t id = response.envelope.request_id();
    pending_.Complete(id, std::move(response));
  }
  void OnClientStreamIdle() override {
    if (idle_streams_.load() > max_idle_connections_) CloseIdleStreams();
  }
  void OnClientStreamDone(ClientStream* stream, const absl::Status& why) override;
  void OnRequest(std::shared_ptr<ServerStream> stream, int from_rank, Message request) override;
  void OnServerStreamDone(int peer_rank, const absl::Status& why, bool said_goodbye) override;
  void ListenForNextStream() override;
  bool serving() const override { return serving_.load(); }
  int MemberRankOf(const PeerIdentity& peer) const override {
    MutexLock lock(&mu_);
    return MemberRank(peer.name, peer.rank, peer.incarnation, workers_);
  }
  uint64_t WorkersVersion() const override { return workers_version_.load(); }

 private:
  // The open stream to `rank`, opening one if needed; an error if the agent
  // is closed or there is no such worker.
  absl::StatusOr<std::shared_ptr<ClientStream>> StreamTo(int rank);
  // Closes the least recently used idle streams beyond the bound, and their
  // channels (see Note [Idle connections], rpc/idle_connections.h).
  void CloseIdleStreams();
  std::shared_ptr<grpc::ChannelCredentials> ChannelCredentials() const;
  std::string PeerName(int rank) const;
  std::string PeerAt(int rank) const;  // with its address, for connection errors

  // What this agent was made with (AgentSetup): its backend's own options
  // and those every backend takes, as RpcOptions declares them (the limits,
  // queues and secret in settings_).
  const GrpcOptions options_;
  const HostAddress host_;
  const int max_idle_connections_;
  WorkerInfo self_;
  StreamSettings settings_;
  DeadlineTimer* const timer_;
  RequestService requests_;  // See Note [Bounded queues]
  const std::shared_ptr<BufferPool> buffers_ = BufferPool::Create();
  std::optional<TlsMaterial> tls_;
  grpc::AsyncGenericService service_;
  // Declared before server_, so the server goes first (gRPC's order).
  std::unique_ptr<CompletionLoop> loop_;
  std::unique_ptr<grpc::Server> server_;
  PendingCalls pending_;

  // Serialises opening streams, so two callers never open two to one peer.
  Mutex connect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  // Signalled when a stream ends: the completion queue may only shut down
  // once none is left to start another operation on it.
  CondVar streams_done_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<grpc::GenericStub>> stubs_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<ClientStream>> streams_ ABSL_GUARDED_BY(mu_);
  int live_client_streams_ ABSL_GUARDED_BY(mu_) = 0;
  int live_server_streams_ ABSL_GUARDED_BY(mu_) = 0;  // listening ones included
  uint64_t next_stream_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::atomic<int> idle_streams_{0};  // client streams with no call in flight
  PeerFailureNotifier peer_failures_;

  std::atomic<bool> serving_{false};
  std::atomic<uint64_t> workers_version_{1};  // bumped by SetWorkers
  ServedCounts served_;
};

absl::Status GrpcAgent::Start() {
  RouteGrpcLogging();
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options_.tls.enabled()) {
    TESSERA_ASSIGN_OR_RETURN(auto tls, LoadTls(options_.tls));
    tls_ = std::move(tls);
    grpc::SslServerCredentialsOptions ssl(
        options_.tls.mutual ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    ssl.pem_root_certs = tls_->root_certs;
    ssl.pem_key_cert_pairs.push_back({tls_->private_key, tls_->cert_chain});
    credentials = grpc::SslServerCredentials(ssl);
  }
  // Health is answered by ServerStream (rpc/grpc/health.h), not gRPC's
  // built-in service; reflection only when asked for (GrpcOptions).
  grpc::EnableDefaultHealthCheckService(false);
  if (options_.reflection) {
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    // Links the Worker service's descriptors in, for reflection to find.
    (void)proto::Frame::descriptor();
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(JoinHostPort(host_.bind, 0), credentials, &port);
  builder.RegisterAsyncGenericService(&service_);
  std::unique_ptr<grpc::ServerCompletionQueue> queue = builder.AddCompletionQueue();
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<size_t>(options_.max_message_bytes, INT_MAX)));
  builder.SetMaxSendMessageSize(static_cast<int>(std::min<size_t>(options_.max_message_bytes, INT_MAX)));
  // A connection that has not sent HTTP/2's preface and settings by then is
  // closed (gRPC's default is 120 s): silent strangers do not pile up.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(options_.handshake_timeout)));
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("gRPC agent of '", self_.name, "' cannot listen on ", host_.bind));
  }
  self_.address = JoinHostPort(host_.advertise.empty() ? host_.bind : host_.advertise, port);
  loop_ = std::make_unique<CompletionLoop>(std::move(queue),
                                           std::max(1, options_.completion_threads));
  ListenForNextStream();
  serving_.store(true);
  TESSERA_LOG(INFO) << self_.name << ": gRPC listening at " << self_.address
                    << (options_.tls.enabled() ? (options_.tls.mutual ? " (mutual TLS)" : " (TLS)")
                                               : " (plaintext)")
                    << (settings_.secret.empty() ? "; no job secret set" : "");
  return absl::OkStatus();
}

std::shared_ptr<grpc::ChannelCredentials> GrpcAgent::ChannelCredentials() const {
  if (!tls_.has_value()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = tls_->root_certs;
  if (options_.tls.mutual) {
    ssl.pem_private_key = tls_->private_key;
    ssl.pem_cert_chain = tls_->cert_chain;
  }
  return grpc::SslCredentials(ssl);
}

std::string GrpcAgent::PeerName(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorker(rank, workers_);
}

std::string GrpcAgent::PeerAt(int rank) const {
  MutexLock lock(&mu_);
  return DescribeWorkerAt(rank, workers_);
}

absl::StatusOr<std::shared_ptr<ClientStream>> GrpcAgent::StreamTo(int rank) {
  const auto shut_down = [this] {
    return absl::FailedPreconditionError("RPC agent of '" + self_.name + "' is shut down");
  };
  {
    // The common case, one lock per call: the stream is open.
    MutexLock lock(&mu_);
    if (closed_) return shut_down();
    if (rank < 0 || rank >= static_cast<int>(workers_.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("no worker with rank ", rank, " (world size ", workers_.size(), ")"));
    }
    auto it = streams_.find(rank);
    if (it != streams_.end()) return it->second;
  }
  MutexLock connect_lock(&connect_mu_);
  grpc::GenericStub* stub = nullptr;
  std::shared_ptr<ClientStream> stream;
  {
    MutexLock lock(&mu_);
    if (closed_) return shut_down();
    auto it = streams_.find(rank);
    if (it != streams_.end()) return it->second;
    auto& slot = stubs_[rank];
    if (slot == nullptr) {
      grpc::ChannelArguments args;
      const int max_bytes = static_cast<int>(std::min<size_t>(options_.max_message_bytes, INT_MAX));
      args.SetMaxReceiveMessageSize(max_bytes);
      args.SetMaxSendMessageSize(max_bytes);
      // Notice a silent peer (a host gone, a cable pulled) without a call.
      args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 10'000);
      args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5'000);
      if (!options_.tls.target_name_override.empty()) {
        args.SetSslTargetNameOverride(options_.tls.target_name_override);
      }
      slot = std::make_unique<grpc::GenericStub>(
          grpc::CreateCustomChannel(workers_[rank].address, ChannelCredentials(), args));
    }
    stub = slot.get();
    stream = std::make_shared<ClientStream>(this, next_stream_id_++, rank, &idle_streams_);
    ++live_client_streams_;
    // Listed before it starts: if it fails at once, OnClientStreamDone must
    // find it to forget it, or later calls would reuse a dead stream.
    streams_[rank] = stream;
  }
  stream->Start(stub, kWorkerExchangeMethod, loop_->queue());
  return stream;
}

void GrpcAgent::CloseIdleStreams() {
  std::vector<std::shared_ptr<ClientStream>> closing;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closing = TakeIdleBeyond(streams_, max_idle_connections_);
    // The channel (its connection) goes once its last call has ended.
    for (const auto& stream : closing) stubs_.erase(stream->peer_rank());
  }
  for (const auto& stream : closing) {
    TESSERA_LOG(DEBUG) << self_.name << ": closing the idle stream to rank " << stream->peer_rank()
                       << " (more than " << max_idle_connections_ << " idle)";
    stream->SayGoodbye();
  }
}

Future<Message> GrpcAgent::Send(int to_rank, Message request, absl::Time deadline) {
  Promise<Message> promise;
  Future<Message> future = promise.GetFuture();
  absl::StatusOr<std::shared_ptr<ClientStream>> stream;
  do {
    stream = StreamTo(to_rank);
    if (!stream.ok()) {
      promise.Set(stream.status());
      return future;
    }
  } while (!(*stream)->use.Claim());  // closing for idleness: take a new one
  const uint64_t id = pending_.Add(promise, to_rank, (*stream)->id(),
                                   request.envelope.target(), deadline);
  StampRequest(id, self_.rank, deadline, &request.envelope);
  auto sent = (*stream)->Send(request);
  if (!sent.ok()) {
    pending_.Complete(id, absl::Status(sent.code(), absl::StrCat("call to worker ",
                                                                PeerName(to_rank), " not sent: ",
                                                                sent.message())));
    if ((*stream)->use.Release()) OnClientStreamIdle();  // no answer will come
  }
  return future;
}

void GrpcAgent::OnClientStreamDone(ClientStream* stream, const absl::Status& why) {
  bool closed = false;
  bool current = false;  // not replaced by a stream to a rejoined incarnation
  {
    MutexLock lock(&mu_);
    auto it = streams_.find(stream->peer_rank());
    // Forget the broken stream, so the next call opens a new one.
    current = it != streams_.end() && it->second.get() == stream;
    if (current) streams_.erase(it);
    closed = closed_;
  }
  const absl::Status status = ConnectionEnded(PeerAt(stream->peer_rank()), why);
  pending_.FailConnectionAndWarn(stream->id(), status, self_.name,
                                 /*warn=*/!closed && !stream->use.closing());
  if (current) peer_failures_.Notify(stream->peer_rank());
  MutexLock lock(&mu_);
  --live_client_streams_;
  streams_done_.SignalAll();
}

void GrpcAgent::OnRequest(std::shared_ptr<ServerStream> stream, int from_rank, Message request) {
  served_.RequestReceived();
  requests_.Serve(from_rank, std::move(request),
                  [this, stream = std::move(stream)](Message response) {
                    stream->Respond(response);
                    served_.ResponseSent();
                  });
}

void GrpcAgent::ListenForNextStream() {
  // Under mu_, so no request for a call is made once Close began: the queue
  // would be shut down under it.
  MutexLock lock(&mu_);
  if (closed_) return;
  ++live_server_streams_;
  std::make_shared<ServerStream>(this)->Listen(&service_, loop_->queue());
}

void GrpcAgent::OnServerStreamDone(int peer_rank, const absl::Status& why, bool said_goodbye) {
  {
    MutexLock lock(&mu_);
    --live_server_streams_;
    streams_done_.SignalAll();
  }
  if (peer_rank < 0 || said_goodbye) return;  // not a worker of the job, or not a failure
  TESSERA_LOG(DEBUG) << self_.name << ": incoming stream from rank " << peer_rank
                     << " ended: " << why;
  peer_failures_.Notify(peer_rank);
}

void GrpcAgent::Close(const absl::Status& reason) {
  std::map<int, std::shared_ptr<ClientStream>> streams;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    peer_failures_.Close();
    streams.swap(streams_);
  }
  pending_.FailAll(reason);
  for (auto& [rank, stream] : streams) stream->Cancel();
  if (server_ != nullptr) {
    serving_.store(false);
    // Cancels the streams peers opened to us and waits for their reactors.
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }
  {
    // Every stream ends with OnDone, which touches this agent; after the
    // server's shutdown and our cancels, none starts a new operation.
    MutexLock lock(&mu_);
    const bool ended = streams_done_.WaitUntil(
        &mu_,
        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return live_client_streams_ == 0 && live_server_streams_ == 0;
        },
        absl::Now() + absl::Seconds(10));
    if (!ended) {
      TESSERA_LOG(ERROR) << self_.name << ": " << live_client_streams_ << " outgoing and "
                         << live_server_streams_
                         << " incoming gRPC streams did not end within 10 s of closing";
    }
  }
  // Runs what the shutdowns left queued (the streams' last reactions), then
  // stops the loop's threads: after this nothing calls into the agent.
  if (loop_ != nullptr) loop_->Shutdown();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcAgent>> CreateGrpcAgent(AgentSetup setup) {
  auto agent = std::make_unique<GrpcAgent>(std::move(setup));
  TESSERA_RETURN_IF_ERROR(agent->Start());
  return std::unique_ptr<RpcAgent>(std::move(agent));
}

}  // namespace tessera::rpc
