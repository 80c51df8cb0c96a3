// ServerPipes: the pipes peers opened to this worker. Each is served only
// after its handshake, as the identity the peer proved there; its requests
// go to the RequestService and the responses back on the same pipe. A peer
// that does not prove itself within the handshake timeout is cut off.
// Private to this package (the TensorPipe agent's incoming half).
//
// Thread-safety: thread-safe; TensorPipe's threads run its callbacks.
#pragma once

#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "auth/job_secret.h"
#include "common/deadline_timer.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "rpc/agent_support.h"
#include "rpc/auth/handshake.h"
#include "rpc/buffer_pool.h"
#include "rpc/codec.h"
#include "rpc/rpc_agent.h"
#include "rpc/tensorpipe/fd_inbox.h"
#include "rpc/tensorpipe/frame_io.h"

namespace tessera::rpc {

// One incoming pipe: a peer's requests come in, our responses go back.
struct ServerPipe {
  explicit ServerPipe(auth::JobSecret secret) : handshake(std::move(secret)) {}
  metrics::OpenConnection counted;

  std::shared_ptr<tensorpipe::Pipe> pipe;
  ServerHandshake handshake;  // driven by the pipe's reads, one at a time
  bool challenged = false;    // likewise
  // Set once the peer proved itself (under ServerPipes' lock): the identity
  // it claimed.
  std::optional<PeerIdentity> peer;
  // The rank its requests are served as (MemberRank); may change from -1 to
  // its rank when SetWorkers learns of a worker that joined.
  std::atomic<int> member_rank{-1};
  DeadlineTimer::Id handshake_timer = 0;
};

class ServerPipes {
 public:
  // What serving needs from the agent; every pointer outlives this.
  struct Setup {
    std::string self_name;
    int self_rank = -1;
    auth::JobSecret secret;
    CodecLimits limits;
    absl::Duration handshake_timeout;
    DeadlineTimer* timer = nullptr;
    RequestService* requests = nullptr;
    ServedCounts* served = nullptr;
    PeerFailureNotifier* peer_failures = nullptr;
    BufferPool* buffers = nullptr;
    // How a response's tensors in shared memory may go to a rank.
    std::function<SharedMemoryRoute(int rank, const Message&)> route_for;
  };
  explicit ServerPipes(Setup setup) : setup_(std::move(setup)) {}

  // Where tensors in shared memory arrive (see Note [Descriptor inbox],
  // rpc/tensorpipe/fd_inbox.h); set before the first pipe, if at all.
  void SetInbox(FdInbox* inbox) { inbox_ = inbox; }
  // Serves a pipe a peer opened (dropped once closed).
  void Accept(std::shared_ptr<tensorpipe::Pipe> pipe);
  // The job's workers now: the ranks proved peers are served as.
  void SetWorkers(const std::vector<WorkerInfo>& workers);
  // Cancels the handshake timers, so that none runs later; before the
  // TensorPipe context closes.
  void Close();
  // Forgets the pipes; once the context has joined its threads.
  void Clear();

 private:
  void ReadRequest(std::shared_ptr<ServerPipe> server);
  // Handles a handshake step; an error rejects the peer.
  absl::Status HandleHandshake(const std::shared_ptr<ServerPipe>& server, const Message& message);
  void RejectPeer(const std::shared_ptr<ServerPipe>& server, const absl::Status& why);
  void Drop(const std::shared_ptr<ServerPipe>& server);
  // Writes a response (or a refusal) to `to_rank` on `pipe`.
  void Respond(const std::shared_ptr<tensorpipe::Pipe>& pipe, int to_rank, Message response);

  const Setup setup_;
  FdInbox* inbox_ = nullptr;
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<WorkerInfo> workers_ ABSL_GUARDED_BY(mu_);
  std::set<std::shared_ptr<ServerPipe>> pipes_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::rpc
