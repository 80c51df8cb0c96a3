#include "rpc/tensorpipe/tensorpipe_agent.h"

#include <signal.h>
#include <tensorpipe/tensorpipe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "common/mutex.h"
#include "common/logging.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/guarded_tcp/guarded_tcp.h"

namespace tessera::rpc {
namespace {

namespace tp = tensorpipe;

// One outgoing pipe: requests go out on it, their responses come back on it.
// Incoming requests arrive on pipes that peers opened to our listener.
struct ClientPipe {
  uint64_t id = 0;
  int rank = -1;
  std::shared_ptr<tp::Pipe> pipe;
};

struct PendingCall {
  Promise<Message> promise;
  uint64_t pipe_id = 0;
  int to_rank = -1;
  std::string target;
  absl::Time started;
  DeadlineTimer::Id timer_id = 0;
};

std::string UniqueShmAddress(const std::string& name) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat("tessera_", getpid(), "_", counter.fetch_add(1), "_", name);
}

class TensorPipeAgent final : public RpcAgent {
 public:
  TensorPipeAgent(const TensorPipeOptions& options, WorkerInfo self,
                  RequestHandler handler, Executor* executor,
                  DeadlineTimer* timer)
      : options_(options),
        self_(std::move(self)),
        handler_(std::move(handler)),
        executor_(executor),
        timer_(timer),
        context_(std::make_shared<tp::Context>(
            tp::ContextOptions().name(self_.name))) {}

  ~TensorPipeAgent() override {
    Close(absl::CancelledError("RPC agent destroyed"));
  }

  absl::Status Start() {
    std::string tcp_name = "uv";
    if (options_.tcp == TcpTransport::kGuarded) {
      tcp_name = "tcp";
      GuardedTcpOptions tcp_options;
      // A descriptor frame is the envelope plus TensorPipe's small header.
      tcp_options.max_frame_bytes = options_.limits.max_envelope_bytes + (64 << 10);
      context_->registerTransport(0, tcp_name, CreateGuardedTcpTransport(tcp_options));
    } else {
      context_->registerTransport(0, tcp_name, tp::transport::uv::create());
    }
    std::vector<std::string> urls = {tcp_name + "://" + options_.listen_host + ":0"};
    std::string transport_choice = tcp_name;
    // TESSERA_TENSORPIPE_SHM=0 turns the shared-memory transport off (e.g.
    // under ThreadSanitizer, whose slowdown upsets TensorPipe's shm handshake).
    const char* shm_env = std::getenv("TESSERA_TENSORPIPE_SHM");
    const bool shm_allowed = shm_env == nullptr || std::string(shm_env) != "0";
    if (options_.enable_shm && shm_allowed) {
      auto shm = tp::transport::shm::create();
      if (shm->isViable()) {
        context_->registerTransport(10, "shm", shm);
        urls.push_back("shm://" + UniqueShmAddress(self_.name));
        transport_choice = "shm (same host), " + tcp_name;
      }
    }
    context_->registerChannel(0, "basic", tp::channel::basic::create());
    std::string channel_choice = "basic";
    if (options_.enable_cma) {
      auto cma = tp::channel::cma::create();
      if (cma->isViable()) {
        context_->registerChannel(10, "cma", cma);
        channel_choice = "cma (same host), basic";
      }
    }
    std::shared_ptr<tp::Listener> listener;
    try {
      listener = context_->listen(urls);
      self_.address = listener->url(tcp_name);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "cannot listen on ", options_.listen_host, ": ", e.what()));
    }
    TESSERA_LOG(INFO) << self_.name << ": TensorPipe listening at "
                      << self_.address << "; transports: " << transport_choice
                      << "; channels: " << channel_choice;
    {
      MutexLock lock(&mu_);
      listener_ = listener;
    }
    Accept(listener);
    return absl::OkStatus();
  }

  const WorkerInfo& self() const override { return self_; }

  void SetWorkers(std::vector<WorkerInfo> workers) override {
    MutexLock lock(&mu_);
    workers_ = std::move(workers);
  }

  Future<Message> Send(int to_rank, Message request,
                       absl::Time deadline) override;

  AgentCounters counters() const override {
    AgentCounters c;
    c.requests_sent = requests_sent_.load();
    c.responses_received = responses_received_.load();
    c.requests_received = requests_received_.load();
    c.responses_sent = responses_sent_.load();
    return c;
  }

  void Close(const absl::Status& reason) override;

  void SetPeerFailureHandler(std::function<void(int rank)> handler) override {
    MutexLock lock(&mu_);
    peer_failure_handler_ = std::move(handler);
  }

 private:
  void NotifyPeerFailure(int rank);
  void Accept(std::shared_ptr<tp::Listener> listener);
  void Relisten();
  // `peer_rank`: who sent the last request on this pipe (-1 before any).
  void ReadRequest(std::shared_ptr<tp::Pipe> pipe, int peer_rank);
  void ServeRequest(std::shared_ptr<tp::Pipe> pipe, Message request);
  void ReadResponse(std::shared_ptr<ClientPipe> client);
  void CompleteCall(uint64_t request_id, absl::StatusOr<Message> result);
  void FailPipe(const std::shared_ptr<ClientPipe>& client,
                const std::string& why);
  std::string PeerName(int rank) const;



  const TensorPipeOptions options_;
  WorkerInfo self_;
  const RequestHandler handler_;
  Executor* const executor_;
  DeadlineTimer* const timer_;
  std::shared_ptr<tp::Context> context_;
  std::shared_ptr<tp::Listener> listener_ ABSL_GUARDED_BY(mu_);  // see Relisten()
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
  std::set<std::shared_ptr<tp::Pipe>> server_pipes_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, PendingCall> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_pipe_id_ ABSL_GUARDED_BY(mu_) = 1;

  std::function<void(int)> peer_failure_handler_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> requests_sent_{0};
  std::atomic<uint64_t> responses_received_{0};
  std::atomic<uint64_t> requests_received_{0};
  std::atomic<uint64_t> responses_sent_{0};
};

std::string TensorPipeAgent::PeerName(int rank) const {
  MutexLock lock(&mu_);
  if (rank >= 0 && rank < static_cast<int>(workers_.size())) {
    return absl::StrCat("'", workers_[rank].name, "' (rank ", rank, ")");
  }
  return absl::StrCat("rank ", rank);
}

Future<Message> TensorPipeAgent::Send(int to_rank, Message request,
                                      absl::Time deadline) {
  // No executor: the runtime's own continuation (decoding) runs inline on
  // the completing thread, and only the future it hands to user code posts
  // callbacks to the pool. That saves a thread hop per call.
  Promise<Message> promise;
  Future<Message> future = promise.GetFuture();
  // Note [No TensorPipe calls under mu_]: TensorPipe may run our callbacks
  // inline in the calling thread (e.g. a connect refused at once), and they
  // take mu_; so pipes are connected and read outside the lock.
  std::shared_ptr<ClientPipe> client;
  std::string address, peer_name;
  {
    MutexLock lock(&mu_);
    if (closed_) {
      promise.Set(absl::FailedPreconditionError(
          "RPC agent of '" + self_.name + "' is shut down"));
      return future;
    }
    if (to_rank < 0 || to_rank >= static_cast<int>(workers_.size())) {
      promise.Set(absl::InvalidArgumentError(
          absl::StrCat("no worker with rank ", to_rank, " (world size ",
                       workers_.size(), ")")));
      return future;
    }
    auto it = client_pipes_.find(to_rank);
    if (it != client_pipes_.end()) client = it->second;
    address = workers_[to_rank].address;
    peer_name = workers_[to_rank].name;
  }
  if (client == nullptr) {
    // Note [One connect at a time]: two threads connecting to one peer at
    // once would leave a second pipe to close mid-handshake — and TensorPipe
    // fails the peer's whole listener for that (Note [Listener restart]),
    // breaking the handshake of the pipe we keep too. So threads connect one
    // at a time, and a thread that waited here finds the pipe made.
    MutexLock connect_lock(&connect_mu_);
    {
      MutexLock lock(&mu_);
      auto it = client_pipes_.find(to_rank);
      if (it != client_pipes_.end()) client = it->second;
    }
    if (client == nullptr) {
      auto fresh = std::make_shared<ClientPipe>();
      fresh->rank = to_rank;
      fresh->pipe = context_->connect(address, tp::PipeOptions().remoteName(peer_name));
      {
        MutexLock lock(&mu_);
        fresh->id = next_pipe_id_++;
        client_pipes_[to_rank] = fresh;
      }
      client = fresh;
      ReadResponse(client);
    }
  }
  uint64_t request_id = 0;
  {
    MutexLock lock(&mu_);
    request_id = next_request_id_++;
    PendingCall call;
    call.promise = promise;
    call.pipe_id = client->id;
    call.to_rank = to_rank;
    call.target = request.envelope.target();
    call.started = absl::Now();
    pending_.emplace(request_id, std::move(call));
  }
  requests_sent_.fetch_add(1);

  const absl::Time now = absl::Now();
  if (deadline != absl::InfiniteFuture()) {
    const auto timer_id = timer_->Schedule(deadline, [this, request_id, to_rank] {
      CompleteCall(request_id,
                   absl::DeadlineExceededError(absl::StrCat(
                       "call to worker ", PeerName(to_rank), " timed out")));
    });
    MutexLock lock(&mu_);
    auto it = pending_.find(request_id);
    if (it != pending_.end()) it->second.timer_id = timer_id;
    request.envelope.set_timeout_us(
        std::max<int64_t>(1, absl::ToInt64Microseconds(deadline - now)));
  }
  request.envelope.set_request_id(request_id);
  request.envelope.set_origin_rank(self_.rank);
  WriteMessage(client->pipe, std::make_shared<Message>(std::move(request)),
               [this, client](const tp::Error& error) {
                 if (error) FailPipe(client, "write failed: " + error.what());
               });
  return future;
}

void TensorPipeAgent::CompleteCall(uint64_t request_id,
                                   absl::StatusOr<Message> result) {
  PendingCall call;
  {
    MutexLock lock(&mu_);
    auto it = pending_.find(request_id);
    if (it == pending_.end()) return;  // already timed out or failed
    call = std::move(it->second);
    pending_.erase(it);
  }
  responses_received_.fetch_add(1);
  timer_->Cancel(call.timer_id);
  if (!result.ok() && absl::IsDeadlineExceeded(result.status())) {
    result = absl::DeadlineExceededError(absl::StrCat(
        result.status().message(), ": '", call.target, "' got no response within ",
        absl::FormatDuration(absl::Now() - call.started)));
  }
  call.promise.Set(std::move(result));
}

void TensorPipeAgent::FailPipe(const std::shared_ptr<ClientPipe>& client,
                               const std::string& why) {
  std::vector<uint64_t> failed;
  {
    MutexLock lock(&mu_);
    auto it = client_pipes_.find(client->rank);
    // Forget the broken pipe, so the next call reconnects.
    if (it != client_pipes_.end() && it->second == client) client_pipes_.erase(it);
    for (const auto& [id, call] : pending_) {
      if (call.pipe_id == client->id) failed.push_back(id);
    }
  }
  NotifyPeerFailure(client->rank);
  if (failed.empty()) return;
  const std::string message = absl::StrCat(
      "worker ", PeerName(client->rank), " is unavailable: ", why);
  TESSERA_LOG(WARNING) << self_.name << ": " << message << " (" << failed.size()
                       << " calls failed)";
  for (uint64_t id : failed) CompleteCall(id, absl::UnavailableError(message));
  client->pipe->close();
}

void TensorPipeAgent::NotifyPeerFailure(int rank) {
  std::function<void(int)> handler;
  {
    MutexLock lock(&mu_);
    if (closed_ || rank < 0) return;
    handler = peer_failure_handler_;
  }
  if (handler) handler(rank);
}

void TensorPipeAgent::ReadResponse(std::shared_ptr<ClientPipe> client) {
  ReadFrame(client->pipe, options_.limits, buffers_.get(), [this, client](absl::StatusOr<Message> message) {
    if (!message.ok()) {
      FailPipe(client, std::string(message.status().message()));
      return;
    }
    if (message->envelope.kind() != proto::RESPONSE) {
      FailPipe(client, "peer sent a non-response on a client pipe");
      return;
    }
    const uint64_t id = message->envelope.request_id();
    CompleteCall(id, *std::move(message));
    ReadResponse(client);
  });
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
      server_pipes_.insert(pipe);
    }
    ReadRequest(pipe, /*peer_rank=*/-1);
    Accept(listener);
  });
}

void TensorPipeAgent::Relisten() {
  std::vector<std::string> urls;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    urls.push_back(self_.address);
  }
  if (options_.enable_shm) urls.push_back("shm://" + UniqueShmAddress(self_.name));
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

void TensorPipeAgent::ReadRequest(std::shared_ptr<tp::Pipe> pipe, int peer_rank) {
  ReadFrame(pipe, options_.limits, buffers_.get(), [this, pipe, peer_rank](absl::StatusOr<Message> message) {
    std::string reject;
    if (!message.ok()) {
      reject = std::string(message.status().message());
    } else if (message->envelope.kind() != proto::CALL &&
               message->envelope.kind() != proto::INTERNAL_CALL) {
      reject = "expected a request, got message kind " +
               std::to_string(message->envelope.kind());
    }
    if (!reject.empty()) {
      const bool peer_left = message.status().code() == absl::StatusCode::kUnavailable;
      if (peer_left) {
        TESSERA_LOG(DEBUG) << self_.name << ": incoming connection ended: " << reject;
        NotifyPeerFailure(peer_rank);
      } else {
        TESSERA_LOG(WARNING) << self_.name
                             << ": closing incoming connection: bad frame: " << reject;
      }
      pipe->close();
      MutexLock lock(&mu_);
      server_pipes_.erase(pipe);
      return;
    }
    requests_received_.fetch_add(1);
    const int origin = message->envelope.origin_rank();
    executor_->Post([this, pipe, request = *std::move(message)]() mutable {
      ServeRequest(pipe, std::move(request));
    });
    ReadRequest(pipe, origin);
  });
}

void TensorPipeAgent::ServeRequest(std::shared_ptr<tp::Pipe> pipe,
                                   Message request) {
  const uint64_t request_id = request.envelope.request_id();
  const int from = request.envelope.origin_rank();
  handler_(from, std::move(request))
      .OnReady([this, pipe, request_id](const absl::StatusOr<Message>& result) {
        auto response = std::make_shared<Message>();
        if (result.ok()) {
          *response = *result;
        } else {
          auto* status = response->envelope.mutable_status();
          status->set_code(static_cast<int>(result.status().code()));
          status->set_message(std::string(result.status().message()));
          status->set_origin_worker(self_.name);
        }
        response->envelope.set_kind(proto::RESPONSE);
        response->envelope.set_request_id(request_id);
        response->envelope.set_origin_rank(self_.rank);
        WriteMessage(pipe, std::move(response), [this](const tp::Error& error) {
          if (error) {
            TESSERA_LOG(DEBUG) << self_.name << ": response not delivered: "
                               << error.what();
          }
          responses_sent_.fetch_add(1);
        });
      });
}

void TensorPipeAgent::Close(const absl::Status& reason) {
  std::map<uint64_t, PendingCall> pending;
  DeadlineTimer::Id relisten_timer = 0;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    pending.swap(pending_);
    relisten_timer = relisten_timer_;
  }
  // Cancel() waits for a callback under way, so none touches `this` later.
  timer_->Cancel(relisten_timer);
  for (auto& [id, call] : pending) {
    timer_->Cancel(call.timer_id);
    responses_received_.fetch_add(1);
    call.promise.Set(reason);
  }
  context_->close();
  context_->join();
  MutexLock lock(&mu_);
  client_pipes_.clear();
  server_pipes_.clear();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RpcAgent>> CreateTensorPipeAgent(
    const TensorPipeOptions& options, const std::string& name, int rank,
    RequestHandler handler, Executor* executor, DeadlineTimer* timer) {
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
  auto agent = std::make_unique<TensorPipeAgent>(options, std::move(self),
                                                 std::move(handler), executor, timer);
  auto status = agent->Start();
  if (!status.ok()) return status;
  return std::unique_ptr<RpcAgent>(std::move(agent));
}

}  // namespace tessera::rpc
