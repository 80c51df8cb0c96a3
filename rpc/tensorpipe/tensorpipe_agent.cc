// The TensorPipe agent's set-up: transports and listener, the worker table,
// accepting pipes (and listening again when TensorPipe fails its listener),
// closing; and the factory (tensorpipe_agent_impl.h).

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/broken_pipe.h"
#include "common/host_address.h"
#include "common/logging.h"
#include "common/status.h"
#include "rpc/tensorpipe/tensorpipe_agent_impl.h"

namespace tessera::rpc {

absl::Status TensorPipeAgent::Start(const AgentSetup& setup) {
  TESSERA_ASSIGN_OR_RETURN(auto registered, RegisterTransports(*context_, setup));
  const std::string& tcp_name = registered.tcp_name;
  same_host_ = registered.same_host;
  inbox_ = std::move(registered.inbox);
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
