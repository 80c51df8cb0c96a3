// Note [Bounded queues]
// A worker queues work in three places that a busy or hostile-but-
// authenticated peer could grow without end: the requests it has taken
// in and not yet answered (queued for its pool or running there), and, per
// peer it calls, the requests not yet handed to the network (TensorPipe's
// list of calls waiting for a handshake and its pipe's write queue; the
// gRPC stream's write queue). Each has a bound, and going past it is a
// RESOURCE_EXHAUSTED error at once, naming the worker, the peer and the
// option — never a queue that grows until the process runs out of memory,
// and never a call that waits in silence until its deadline.
//
//  - Callee: at most QueueLimits::max_requests_in_service user calls are
//    held at once. One more is answered at once, from the transport thread,
//    without being decoded or queued; the worker goes on serving the calls
//    it holds and takes new ones as they finish. Internal calls (the RRef
//    protocol, distributed autograd, shutdown's agreement) are counted apart
//    and never refused: refusing them would break protocols whose every
//    message must arrive, and only members of the job (who proved the job
//    secret) can send them.
//  - Caller: at most QueueLimits::max_unsent_bytes_per_peer bytes of
//    requests (envelope and tensors) wait to be sent to one peer. A request
//    that would go past it fails at once — unless nothing is waiting, so a
//    single request larger than the bound still goes. Calls sent and
//    awaiting answers are not counted: a peer holds at most its own
//    max_requests_in_service of them.
//
// With both, the pool's own task queue is bounded too: it holds requests
// (at most max_requests_in_service, plus internal ones), continuations of
// answered calls (at most one per call in flight) and membership events.
//
// Thread-safety: RequestAdmission is thread-safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tessera::rpc {

struct QueueLimits {
  // User calls from peers a worker holds at once (queued or running). Above
  // a parameter server's trainers times their calls in flight; a call that
  // blocks (a batch-update server holding every trainer's call) counts.
  int max_requests_in_service = 4096;
  // Bytes of requests to one peer waiting to be sent.
  uint64_t max_unsent_bytes_per_peer = uint64_t{1} << 30;
};

// The callee's bound: user calls held at once.
class RequestAdmission {
 public:
  explicit RequestAdmission(int limit) : limit_(limit) {}

  // Takes a call in (call Finished() once it is answered), or refuses it:
  // false, and the call must be answered with Refusal().
  bool TryAdmit();
  void Finished() { held_.fetch_sub(1, std::memory_order_relaxed); }
  // RESOURCE_EXHAUSTED: "worker 'ps' holds 4096 calls (RpcOptions::queues.
  // max_requests_in_service); the caller should wait for answers ...".
  absl::Status Refusal(const std::string& self_name) const;
  int held() const { return held_.load(std::memory_order_relaxed); }

 private:
  const int limit_;
  std::atomic<int> held_{0};
};

// The caller's bound, for one connection: whether a request of `bytes` may
// wait behind `waiting` bytes not yet sent.
inline bool FitsUnsentBytes(uint64_t waiting, uint64_t bytes, uint64_t limit) {
  return waiting == 0 || waiting + bytes <= limit;
}
// What a request that does not fit fails with (RESOURCE_EXHAUSTED); the
// agent names the peer around it.
absl::Status UnsentBytesExhausted(uint64_t waiting, uint64_t bytes, uint64_t limit,
                                  const std::string& self_name);

}  // namespace tessera::rpc
