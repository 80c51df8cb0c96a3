// What every RpcAgent backend does alike, whatever its transport: stamping
// outgoing requests, building responses, naming peers in errors, turning a
// lost connection into the calls' error, and reporting dead peers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/executor.h"
#include "common/mutex.h"
#include "rpc/message.h"
#include "rpc/queue_limits.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

// Sets what the agent owns in a request: its id, the sender, and the time
// left until `deadline` (relative, so clocks need not agree).
void StampRequest(uint64_t request_id, int self_rank, absl::Time deadline,
                  proto::Envelope* envelope);

// The response to request `request_id`: the handler's message, or its error
// attributed to this worker (`self_name`).
Message ResponseTo(uint64_t request_id, const absl::StatusOr<Message>& result,
                   const std::string& self_name, int self_rank);

// A message's size for queue bounds (see Note [Bounded queues]): its envelope
// and its tensors' bytes.
uint64_t MessageBytes(const Message& message);

// "'name' (rank r)", or "rank r" for a rank outside `workers`.
std::string DescribeWorker(int rank, const std::vector<WorkerInfo>& workers);

// DescribeWorker with the address peers dial and where that came from, for
// connection errors: "'ps' (rank 0) at tcp://10.0.0.1:4000 (the address it
// published at rendezvous)".
std::string DescribeWorkerAt(int rank, const std::vector<WorkerInfo>& workers);

// The error for calls on a connection to `peer` (DescribeWorker) that
// ended with `why`: a refused handshake stays Unauthenticated, anything else
// means the peer is Unavailable.
absl::Status ConnectionEnded(const std::string& peer, const absl::Status& why);

// How every backend serves an authenticated peer's request (see Note [Bounded
// queues], rpc/queue_limits.h): a user call past the admission bound is
// answered at once with the refusal, on the calling (transport) thread;
// anything else runs the handler on the executor — handlers may block, so
// never on a transport thread — and the response goes to `respond`.
class RequestService {
 public:
  RequestService(RequestHandler handler, Executor* executor, int max_requests_in_service,
                 std::string self_name, int self_rank)
      : handler_(std::move(handler)),
        executor_(executor),
        admission_(max_requests_in_service),
        self_name_(std::move(self_name)),
        self_rank_(self_rank) {}

  // `respond` sends the response (refusal, result or error) from any thread.
  void Serve(int from_rank, Message request, std::function<void(Message response)> respond);

 private:
  const RequestHandler handler_;
  Executor* const executor_;
  RequestAdmission admission_;
  const std::string self_name_;
  const int self_rank_;
};

// The serving half of an agent's AgentCounters (PendingCalls::Counts() has
// the calling half).
class ServedCounts {
 public:
  void RequestReceived() { requests_received_.fetch_add(1); }
  void ResponseSent() { responses_sent_.fetch_add(1); }
  // `calls` (the calling half) with the serving half filled in.
  AgentCounters Complete(AgentCounters calls) const {
    calls.requests_received = requests_received_.load();
    calls.responses_sent = responses_sent_.load();
    return calls;
  }

 private:
  std::atomic<uint64_t> requests_received_{0};
  std::atomic<uint64_t> responses_sent_{0};
};

// Hands peer failures to the runtime's handler until the agent closes.
class PeerFailureNotifier {
 public:
  void Set(std::function<void(int rank)> handler) {
    MutexLock lock(&mu_);
    handler_ = std::move(handler);
  }
  // Ignores ranks < 0 (peers that are not workers of the job).
  void Notify(int rank) {
    std::function<void(int)> handler;
    {
      MutexLock lock(&mu_);
      if (closed_ || rank < 0) return;
      handler = handler_;
    }
    if (handler) handler(rank);
  }
  // From now on, connections closing are expected, not failures.
  void Close() {
    MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(int)> handler_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera::rpc
