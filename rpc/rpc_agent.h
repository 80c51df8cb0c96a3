// RpcAgent: moves request and response Messages between workers.
//
// The agent knows nothing of functions or values: it sends a request to a
// rank and completes a future with the matching response, and hands incoming
// requests to a RequestHandler. Backends (rpc/tensorpipe/, rpc/grpc/)
// implement it behind a factory (RpcOptions::agent_factory, chosen by
// rpc::Init); the runtime core never includes them (scripts/check_layering.sh).
//
// Contract every backend keeps:
//  - each future from Send() completes exactly once: with the response, with
//    DeadlineExceeded when the deadline passes, with Unavailable when the
//    connection to the peer dies, or with the Close() status;
//  - a malformed frame from a peer closes that connection with a logged
//    reason and never stops the worker serving others;
//  - handlers never run on transport threads. Futures from Send() may
//    complete on one, so their continuations must be short and non-blocking
//    (the runtime decodes there and hands user code a future whose
//    callbacks run on its pool).
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/future.h"
#include "rpc/message.h"

namespace tessera::rpc {

struct WorkerInfo {
  std::string name;
  int rank = -1;
  // Where peers connect (backend-specific URL).
  std::string address;
  std::string role;  // RpcOptions::role
  // What peers compare to tell whether same-host fast paths can reach this
  // worker (TensorPipe: its shm and cma domain descriptors); backend-specific.
  std::string locality;
  // 0 for a rank's first process; each restart of the rank alone that
  // rejoins the running job counts one more (see Note [Elastic membership]).
  int incarnation = 0;
};

// Note [Fencing stale incarnations]: a process that was cut off, not dead,
// may live on after its rank restarted elsewhere (its launcher gave up on
// it, or node 0 declared its node lost). It must never act under the rank
// again: its handshake says which incarnation it is, and a connection from
// an incarnation older than the worker table's is refused — at the
// handshake, and for every request on a connection made before the table
// learned of the newer one — with an error naming it. Not a defence against
// a member lying about its incarnation: every member knows the secret (see
// rpc/auth/handshake.h).
inline constexpr int kStaleIncarnation = -2;

// The rank a connection's peer is served as: its claimed rank if the name
// matches the worker table (or the table is not known yet, during start),
// kStaleIncarnation if the table has a newer incarnation of that rank, else
// -1 — a client from outside the job's worker set (another language's
// client with the secret), which must not pass for a worker.
inline int MemberRank(const std::string& name, int rank, int incarnation,
                      const std::vector<WorkerInfo>& workers) {
  if (workers.empty()) return rank;
  if (rank < 0 || rank >= static_cast<int>(workers.size())) return -1;
  if (workers[rank].name != name) return -1;
  return incarnation < workers[rank].incarnation ? kStaleIncarnation : rank;
}

// What a peer of kStaleIncarnation is told.
inline absl::Status StaleIncarnationError(const std::string& name, int rank, int incarnation,
                                          const std::string& refused_by) {
  return absl::PermissionDeniedError(
      "'" + name + "' (rank " + std::to_string(rank) + ") incarnation " +
      std::to_string(incarnation) + " was replaced by a newer incarnation of its rank (restarted " +
      "while it was cut off, not dead): '" + refused_by +
      "' refuses a stale process (see Note [Fencing stale incarnations])");
}

// Serves one incoming request; the response is sent when the future completes.
using RequestHandler =
    std::function<Future<Message>(int from_rank, Message request)>;

// Cumulative message counts, for agreeing on quiescence at shutdown.
struct AgentCounters {
  uint64_t requests_sent = 0;
  uint64_t responses_received = 0;  // including calls failed locally
  uint64_t requests_received = 0;
  uint64_t responses_sent = 0;

  bool operator==(const AgentCounters& o) const {
    return requests_sent == o.requests_sent &&
           responses_received == o.responses_received &&
           requests_received == o.requests_received &&
           responses_sent == o.responses_sent;
  }
};

class RpcAgent {
 public:
  virtual ~RpcAgent() = default;

  virtual const WorkerInfo& self() const = 0;

  // Installs the table of all workers (indexed by rank) after rendezvous,
  // before the first Send(); and again when membership changes (a rank
  // rejoined with a new address, a worker joined beyond the table). Then a
  // connection to a rank whose address changed is dropped (the next call
  // dials the new one), and connections from peers the old table did not
  // know are served under their rank from now on.
  virtual void SetWorkers(std::vector<WorkerInfo> workers) = 0;

  // Sends `request` to `to_rank`. The agent fills in request_id and
  // origin_rank, and the remaining time as timeout_us.
  virtual Future<Message> Send(int to_rank, Message request,
                               absl::Time deadline) = 0;

  virtual AgentCounters counters() const = 0;

  // Called (on a transport thread; keep it short) when a connection to or
  // from `rank` breaks other than by Close(). Set before the first Send().
  virtual void SetPeerFailureHandler(std::function<void(int rank)> handler) = 0;

  // Stops everything: pending futures fail with `reason`, connections and
  // the listener close, transport threads are joined. Idempotent.
  virtual void Close(const absl::Status& reason) = 0;
};

}  // namespace tessera::rpc
