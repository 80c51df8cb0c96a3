// When and how long a connecting side of the guarded transports tries again.
//
// Note [Connect again]: in a connection storm — a job's workers all dialling
// one another at start, 127 trainers dialling one server — a connection can
// fail for reasons that say nothing about the peer's health:
//  - connect() on a Unix socket whose listen backlog is full fails at once
//    with EAGAIN (a full TCP backlog drops the SYN instead, and the
//    kernel's own retransmission tries again);
//  - a listener whose transport gate is full closes its longest-waiting
//    connection (see Note [Full gate], listener_impl.cc): the connecting side
//    sees EOF or a reset before the gate's challenge arrives.
// Until the challenge arrives nothing of TensorPipe has passed on the
// connection (its reads and writes wait for the gate), so the connecting
// side may drop the socket and dial again without TensorPipe noticing.
// It does so after a growing, jittered delay (spreading a storm's retries)
// for up to the transport's connect budget (GuardedTcpOptions; the agent's
// handshake timeout: a loaded host is slow, not failed); past that the
// connection fails, naming the last cause and the attempts. A refused connection (nothing listens:
// a dead worker) and any failure after the challenge are not retried: they are reported at once, as
// before.
#pragma once

#include <optional>
#include <random>
#include <string>

#include "absl/time/time.h"

namespace tessera::rpc::guarded_tcp {

// True for a connect() errno that a later attempt may not meet (a full
// backlog).
bool IsBusyListener(int connect_errno);

class ConnectRetry {
 public:
  explicit ConnectRetry(absl::Duration budget, absl::Duration first_delay = absl::Milliseconds(2),
                        absl::Duration max_delay = absl::Milliseconds(250));

  // An attempt began at `now` (the first call starts the budget).
  void Attempted(absl::Time now);
  // The delay before the next attempt, after one that failed at `now`; none
  // once the next attempt would start past the budget.
  std::optional<absl::Duration> NextDelay(absl::Time now);
  int attempts() const { return attempts_; }
  // "3 attempts over 1.2s", for the error that ends the retries.
  std::string Describe(absl::Time now) const;

 private:
  const absl::Duration budget_;
  const absl::Duration max_delay_;
  absl::Duration delay_;
  absl::Time first_attempt_ = absl::InfinitePast();
  int attempts_ = 0;
  std::minstd_rand jitter_;
};

}  // namespace tessera::rpc::guarded_tcp
