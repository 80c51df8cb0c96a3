// PendingCalls: the calls an agent sent and awaits answers to, by request id.
//
// Shared by the transports: each call completes exactly once — with its
// response, its deadline (DeadlineExceeded naming the peer, the target and
// the time waited), the failure of the connection it went out on, or the
// agent's close status. Whichever comes first wins; the rest are no-ops.
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/deadline_timer.h"
#include "common/future.h"
#include "common/mutex.h"
#include "rpc/message.h"
#include "rpc/rpc_agent.h"

namespace tessera::rpc {

class PendingCalls {
 public:
  // `peer_name(rank)` names a peer in errors.
  PendingCalls(DeadlineTimer* timer, std::function<std::string(int rank)> peer_name)
      : timer_(timer), peer_name_(std::move(peer_name)) {}

  // Registers a call to `to_rank` over connection `connection_id`; returns
  // its request id. The future fails at `deadline` unless answered before.
  uint64_t Add(Promise<Message> promise, int to_rank, uint64_t connection_id,
               const std::string& target, absl::Time deadline);

  // Completes call `request_id` (no-op if it already completed).
  void Complete(uint64_t request_id, absl::StatusOr<Message> result);

  // Fails every call sent over `connection_id`; returns how many.
  size_t FailConnection(uint64_t connection_id, const absl::Status& status);

  // FailConnection, then, if any call failed and `warn`, logs a warning
  // "<self>: <status message> (N calls failed)".
  void FailConnectionAndWarn(uint64_t connection_id, const absl::Status& status,
                             const std::string& self, bool warn);

  // Fails every call with `reason`; later Add()s still work (callers check
  // their own closed flag first).
  void FailAll(const absl::Status& reason);

  // The calling half of AgentCounters: calls added (sent) and completed,
  // in any way, so far.
  AgentCounters Counts() const;

 private:
  struct Call {
    Promise<Message> promise;
    uint64_t connection_id = 0;
    int to_rank = -1;
    std::string target;
    absl::Time started;
    DeadlineTimer::Id timer_id = 0;
  };

  void Finish(Call call, absl::StatusOr<Message> result);

  DeadlineTimer* const timer_;
  const std::function<std::string(int)> peer_name_;
  mutable Mutex mu_;
  std::map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::rpc
