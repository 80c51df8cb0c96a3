// The TensorPipe agent: it listens and accepts, sends requests on the pipes
// this worker opens and reads their answers (tensorpipe_agent.cc), and
// hands the pipes peers open to ServerPipes (server_pipes.h), which serves
// them. Private to this package; tensorpipe_agent.h makes one.
#pragma once

#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "common/deadline_timer.h"
#include "common/executor.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "rpc/agent_support.h"
#include "rpc/auth/handshake.h"
#include "rpc/buffer_pool.h"
#include "rpc/idle_connections.h"
#include "rpc/pending_calls.h"
#include "rpc/queue_limits.h"
#include "rpc/rpc_agent.h"
#include "rpc/tensorpipe/fd_inbox.h"
#include "rpc/tensorpipe/frame_io.h"
#include "rpc/tensorpipe/server_pipes.h"
#include "rpc/tensorpipe/tensorpipe_agent.h"
#include "rpc/tensorpipe/transport_choice.h"

namespace tessera::rpc {

namespace tp = tensorpipe;

// A request on its way out, its size for the bound on unsent bytes, and how
// its tensors in shared memory go (those that go as handles are not counted).
struct OutgoingRequest {
  std::shared_ptr<Message> message;
  uint64_t bytes = 0;
  SharedMemoryRoute route;
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
  // Bytes of requests waiting or being written (see Note [Bounded queues]).
  uint64_t unsent_bytes ABSL_GUARDED_BY(mu) = 0;
  ConnectionUse use;  // See Note [Idle connections]
  metrics::OpenConnection counted;
};

class TensorPipeAgent final : public RpcAgent {
 public:
  // Copies from `setup`, which Start reads again.
  explicit TensorPipeAgent(const AgentSetup& setup)
      : options_(setup.options->tensorpipe),
        host_(setup.host),
        limits_(setup.options->limits),
        max_idle_connections_(setup.options->max_idle_connections),
        queues_(setup.options->queues),
        secret_(setup.options->job_secret),
        self_(setup.self),
        timer_(setup.timer),
        requests_(setup.handler, setup.executor, queues_.max_requests_in_service, self_.name,
                  self_.rank),
        context_(std::make_shared<tp::Context>(tp::ContextOptions().name(self_.name))),
        pending_(timer_, [this](int rank) { return PeerAt(rank); }),
        incoming_(ServerPipes::Setup{
            self_.name, self_.rank, secret_, limits_, options_.handshake_timeout, timer_,
            &requests_, &served_, &peer_failures_, buffers_.get(),
            [this](int rank, const Message& message) { return RouteFor(rank, message); }}) {}

  ~TensorPipeAgent() override {
    Close(absl::CancelledError("RPC agent destroyed"));
  }

  // Listens (TCP and the same-host transport) and starts accepting;
  // `setup` is the one the agent was made with.
  absl::Status Start(const AgentSetup& setup);

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
  std::string PeerAt(int rank) const;  // with its address, for connection errors
  std::string PeerName(int rank) const;
  // How `message`'s tensors in shared memory may go to `rank` (see Note
  // [Tensors in shared memory]); no route when it has none or the peer is
  // not on this host's Unix-socket transport.
  SharedMemoryRoute RouteFor(int rank, const Message& message) const;

  // The pipe to `to_rank`, connected now if there is none; nullptr and
  // `error` if the agent is closed or the rank unknown.
  std::shared_ptr<ClientPipe> PipeTo(int to_rank, absl::Status* error);
  void WriteRequest(const std::shared_ptr<ClientPipe>& client, std::shared_ptr<Message> request);
  // Writes a request counted in client->unsent_bytes; uncounts it once written.
  void WriteCounted(const std::shared_ptr<ClientPipe>& client, OutgoingRequest request);
  void ReadResponse(std::shared_ptr<ClientPipe> client);
  absl::Status HandleClientHandshake(const std::shared_ptr<ClientPipe>& client,
                                     const Message& message);
  void FailPipe(const std::shared_ptr<ClientPipe>& client, const absl::Status& why,
                bool notify = true);
  // A call on `client` ended (answered, or refused before it was sent):
  // the pipe may now be idle, and idle pipes beyond the bound close.
  void CallEnded(const std::shared_ptr<ClientPipe>& client);
  // Closes the least recently used idle pipes beyond the bound.
  void CloseIdlePipes();

  // What this agent was made with (AgentSetup): its backend's own options
  // and those every backend takes, as RpcOptions declares them.
  const TensorPipeOptions options_;
  const HostAddress host_;
  const CodecLimits limits_;
  const int max_idle_connections_;
  const QueueLimits queues_;
  const auth::JobSecret secret_;
  WorkerInfo self_;
  DeadlineTimer* const timer_;
  RequestService requests_;  // See Note [Bounded queues]
  // See Note [Descriptor inbox]; set by Start(), outlives the context's threads.
  std::unique_ptr<FdInbox> inbox_;
  std::shared_ptr<tp::Context> context_;
  std::shared_ptr<tp::Listener> listener_ ABSL_GUARDED_BY(mu_);  // see Relisten()
  std::string listen_url_;  // the TCP listener's; self_.address is what peers dial
  SameHostTransport same_host_ = SameHostTransport::kTcp;  // set by Start()
  const std::shared_ptr<BufferPool> buffers_ = BufferPool::Create();
  absl::Duration relisten_backoff_ ABSL_GUARDED_BY(mu_) = absl::Milliseconds(1);
  DeadlineTimer::Id relisten_timer_ ABSL_GUARDED_BY(mu_) = 0;

  // Serialises connecting (see Note [One connect at a time]); never taken by
  // TensorPipe callbacks, so TensorPipe may be called under it.
  Mutex connect_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::shared_ptr<ClientPipe>> client_pipes_ ABSL_GUARDED_BY(mu_);
  uint64_t next_pipe_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Client pipes with no call in flight (see Note [Idle connections]).
  std::atomic<int> idle_pipes_{0};
  PendingCalls pending_;

  PeerFailureNotifier peer_failures_;

  ServedCounts served_;
  // Last: its callbacks use the members above (the context joins in Close).
  ServerPipes incoming_;
};

}  // namespace tessera::rpc
